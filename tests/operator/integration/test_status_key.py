"""The operator reads an engine's index status with that engine's own status key, never a tenant's key.

An engine that requires its key names its indexes on GET /health to an admin only (issue 22). The operator
derives one key per RAGEngine from its ``status_key_secret`` (manifests/status_key.py) and renders only the
key's SHA-256 into the engine's environment. Here a real ``ragengine serve`` that requires an admin key the
operator never sees holds the SHA-256 from the rendered Deployment: status.indexes lists its index. An
operator with another secret (whose key the engine does not know) gets no index names.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.engine_process import engine_process

from .conftest import OPERATOR_ENV, ROOT
from .kube import wait_for

ADMIN_KEY = "tenant-admin-key-0123456789"  # the tenant's: the operator is never given it
SECRET = "operator-status-secret-0123456789abcdef"


def _engine_env(kube, ns: str, name: str) -> dict[str, str]:
    containers = kube.deployment(ns, f"{name}-engine")["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in containers[0]["env"]}


def _operator(ns: str, engine_url: str, secret: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, **OPERATOR_ENV, "RAGENGINE_OPERATOR_ENGINE_URL": engine_url,
           "RAGENGINE_OPERATOR_RESYNC_SECONDS": "2", "RAGENGINE_OPERATOR_STATUS_KEY_SECRET": secret}
    return subprocess.Popen([str(Path(sys.executable).with_name("ragengine-operator")), "--namespace", ns],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, cwd=ROOT)


def _stop(proc: subprocess.Popen, log: Path) -> None:
    proc.terminate()
    proc.wait(timeout=30)
    assert "Traceback" not in log.read_text(), log.read_text()[-4000:]


def test_status_indexes_come_from_an_engine_that_requires_its_key(kube, bare_namespace, tmp_path):
    ns, name = bare_namespace, "keyed"
    kube.create_rag(ns, name, {"auth": {"enabled": True}})
    log = tmp_path / "operator.log"
    # The operator renders the Deployment first (its engine URL is not used until the engine is up).
    first = _operator(ns, "http://127.0.0.1:9", SECRET, log)
    try:
        wait_for(lambda: kube.deployment(ns, f"{name}-engine"), 60, "the engine Deployment")
    finally:
        _stop(first, log)
    env = _engine_env(kube, ns, name)
    digest = env["RAGENGINE_STATUS_KEY_SHA256"]
    assert len(digest) == 64 and SECRET not in str(env)
    settings = {"api_key": ADMIN_KEY, "status_key_sha256": digest}
    with engine_process(tmp_path / "engine", settings=settings, llm=False) as engine:
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        made = httpx.post(f"{engine.base_url}/index", headers=admin, timeout=60,
                          json={"index_name": "runbooks", "documents": [{"text": "Restart the pump twice."}]})
        assert made.status_code == 200, made.text
        assert "runbooks" not in httpx.get(f"{engine.base_url}/health").text  # no key: status only

        wrong = _operator(ns, engine.base_url, "another-operators-secret-0123456789abc", log)
        try:
            wait_for(lambda: "answered HTTP 200 without the indexes" in str(kube.get_rag(ns, name).get("status")), 60,
                     "the operator with the wrong secret to report that it saw no indexes")
            assert not (kube.get_rag(ns, name).get("status") or {}).get("indexes")
        finally:
            _stop(wrong, log)

        right = _operator(ns, engine.base_url, SECRET, log)
        try:
            wait_for(lambda: [i.get("name") for i in (kube.get_rag(ns, name).get("status") or {}).get("indexes") or []]
                     == ["runbooks"], 60, "status.indexes to list the engine's index")
        finally:
            _stop(right, log)

"""Schemathesis, driven by the engine's own /openapi.json, against a real engine process with access control on
(issues 15 and 41).

A fixed seed and a bounded number of examples per operation, so it fits the suite (about two minutes on two
cores); ``make fuzz`` runs it to at least 20,000 requests with a random seed. Checks: no 5xx, every response
body matches the schema declared for its status, only declared statuses are answered, and no principal is
shown another's data (``fuzz_hooks.no_foreign_data``), with keys of each role (two index-scoped), no key and
a wrong one, through the examples, coverage, fuzzing and stateful (OpenAPI links) phases.
"""

from __future__ import annotations

from ragengine.access.routes import is_open
from tests.contract.fuzz import engine_settings, run_fuzz, seed_engine
from tests.support.engine_process import engine_process

SEED = 20261123
MAX_EXAMPLES = 8


def test_schemathesis_finds_no_contract_violation_nor_a_leak(tmp_path):
    settings, env = engine_settings(tmp_path)
    with engine_process(tmp_path, settings=settings, env=env) as engine:
        known, state = seed_engine(engine.base_url)
        result = run_fuzz(engine.base_url, known, state, seed=SEED, max_examples=MAX_EXAMPLES)
    print(f"schemathesis seed {SEED}: {result.summary()}; 5xx: {result.server_errors}")
    assert result.returncode == 0, result.output[-12000:]
    assert result.server_errors == 0
    assert result.requests > 1000, result.summary()  # it really ran every operation
    assert set(result.by_principal) >= {"reader", "writer", "scoped", "admin", "none"}, result.summary()
    assert "Stateful" in result.output, result.output[-3000:]
    # The seeded ids took it past "404 not found" into the routes' logic, as principals of each role.
    succeeded = {(method, path) for method, path, status, _who in result.responses if 200 <= status < 300}
    for reached in [("POST", "/retrieve"), ("POST", "/v1/sessions"), ("GET", "/v1/vector_stores"),
                    ("POST", "/v1/responses"), ("GET", "/indexes")]:
        assert reached in succeeded, (reached, result.summary())
    assert any(p.startswith("/indexes/") and p.endswith("/documents") for m, p in succeeded if m == "GET"), succeeded
    # the evaluations and the console's /whoami are fuzzed too, past their 404s
    assert any(p.startswith("/indexes/") and p.endswith("/evaluations") for _m, p in succeeded), succeeded
    assert ("GET", "/whoami") in succeeded, result.summary()
    refused = {status for _m, path, status, who in result.responses if who in ("none", "wrong-key") and not is_open(path)}
    assert refused == {401}, refused

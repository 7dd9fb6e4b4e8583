"""Schemathesis, driven by the engine's own /openapi.json, against a real engine process (issue 15).

Fixed seed and a bounded number of examples per operation so it takes a few minutes on two cores;
``make fuzz`` runs it longer with a random seed. Checks: no 5xx, every response body matches the
schema declared for its status, and only declared statuses are answered.
"""

from __future__ import annotations

from tests.contract.fuzz import run_fuzz, seed_engine
from tests.support.engine_process import engine_process

SEED = 20261123
MAX_EXAMPLES = 25


def test_schemathesis_finds_no_contract_violation(tmp_path):
    with engine_process(tmp_path) as engine:
        result = run_fuzz(engine.base_url, seed_engine(engine.base_url), seed=SEED, max_examples=MAX_EXAMPLES)
    print(f"schemathesis seed {SEED}: {result.summary()}")
    assert result.returncode == 0, result.output[-12000:]
    assert result.requests > 500, result.summary()  # it really ran every operation
    # The seeded ids took it past "404 not found" into the routes' logic.
    succeeded = {(method, path) for method, path, status in result.responses if 200 <= status < 300}
    for reached in [("GET", "/indexes/seeded/documents"), ("POST", "/indexes/seeded/documents"),
                    ("POST", "/indexes/seeded/documents/delete"), ("POST", "/retrieve"), ("POST", "/v1/sessions"),
                    ("POST", "/v1/vector_stores"), ("GET", "/v1/vector_stores"),
                    ("POST", "/v1/vector_stores/seeded-store/search"), ("GET", "/v1/vector_stores/seeded-store/files"),
                    ("POST", "/v1/responses")]:
        assert reached in succeeded, (reached, result.summary())

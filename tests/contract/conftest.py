"""Contract fixtures: one real engine process (and its test LLM) per run, seeded with an index, a session, a file.

The fuzz test starts an engine of its own: what it creates and deletes must not reach the other tests.
"""

from __future__ import annotations

import pytest

from tests.contract.fuzz import seed_engine
from tests.support.engine_process import EngineProcess, engine_process


@pytest.fixture(scope="session")
def engine(tmp_path_factory) -> EngineProcess:
    with engine_process(tmp_path_factory.mktemp("engine")) as proc:
        proc.known_ids = seed_engine(proc.base_url)
        yield proc

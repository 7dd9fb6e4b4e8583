"""Path rules on an S3 source hide ``hr/`` from a non-member wherever documents reach a caller: ``/retrieve``,
the listing, a chat completion's sources and the prompt the engine sends the LLM. A real engine with keys and
groups (docs/access.md), the real sync code, a real S3 server, and the scripted LLM as the only double."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from ragengine_operator.sources.engine import EngineClient
from ragengine_operator.sources.sync import fetch, sync_source
from ragengine_operator.spec.sources import Source
from tests.conversations.scripted_llm import ScriptedLLM, create_scripted_app
from tests.sources.test_git_sync import LOOPBACK
from tests.support.embedding import serve_engine
from tests.support.s3_server import s3_server
from tests.support.server import serve_app

ADMIN, HR, STAFF = "admin-0123456789abcdef", "hr-key-0123456789abcdef", "staff-key-0123456789abcdef"
ACCESS = {"keys": [
    {"name": "hr-reader", "key": HR, "indexes": ["handbook"], "role": "read", "groups": ["hr", "staff"]},
    {"name": "staff-reader", "key": STAFF, "indexes": ["handbook"], "role": "read", "groups": ["staff"]},
]}
QUESTION = "When are salaries paid and how do I restart the pump?"
RULES = [{"paths": ["hr/**"], "acl": ["group:hr"]}, {"paths": ["**"], "acl": ["group:staff"]}]


@pytest.fixture
def stack(embedder, tmp_path):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    llm = ScriptedLLM(model="scripted")
    with serve_app(create_scripted_app(llm)) as llm_base, s3_server(tmp_path) as s3:
        (tmp_path / "access.yaml").write_text(json.dumps(ACCESS))
        settings = EngineSettings(api_key=ADMIN, access_file=tmp_path / "access.yaml", data_dir=tmp_path / "data",
                                  llm_url=llm_base + "/v1", llm_retries=0, similarity_threshold=0.0)
        with serve_engine(create_app(settings), embedder) as base:
            yield base, llm, s3


def _as(base: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=base, timeout=120, headers={"Authorization": f"Bearer {key}"})


def test_path_rules_hide_hr_from_a_non_member_in_retrieval_and_chat(stack):
    base, llm, s3 = stack
    s3.make_bucket("company")
    s3.put("company", "handbook/hr/pay.md", "# Pay\n\nSalaries are paid on the 25th. Marker HRSECRET.\n")
    s3.put("company", "handbook/runbooks/pump.md", "# Pump\n\nRestart the pump with valve V-7. Marker STAFFPUMP.\n")
    source = Source.model_validate({"name": "handbook", "s3": {"endpoint": s3.base, "bucket": "company",
                                                               "prefix": "handbook/", "secretRef": {"name": "s3"}},
                                    "aclRules": RULES})
    client = EngineClient(base, ADMIN)  # the sync writes with the engine's key, as the operator's worker does
    try:
        result = sync_source(source, client, lambda: fetch(
            source, cache=Path("unused"), secret=s3.secret, previous_revision=None, previous_validators=None,
            policy=LOOPBACK, held=lambda: client.documents_of("handbook", "handbook")))
    finally:
        client.close()
    assert result.ok and result.documents == 2, result.message

    seen = {}
    for who, key in (("hr", HR), ("staff", STAFF)):
        with _as(base, key) as c:
            hits = c.post("/retrieve", json={"index_name": "handbook", "query": QUESTION, "max_node_count": 50})
            assert hits.status_code == 200, hits.text
            listing = c.get("/indexes/handbook/documents", params={"limit": 100, "max_text_length": 10000}).json()
            llm.reset()
            chat = c.post("/v1/chat/completions", json={"index_name": "handbook",
                                                        "messages": [{"role": "user", "content": QUESTION}]})
            assert chat.status_code == 200, chat.text
            seen[who] = (hits.text, json.dumps(listing), chat.text, json.dumps(llm.chats()))
    assert all("HRSECRET" in part and "STAFFPUMP" in part for part in seen["hr"][:2])
    retrieved, prompted = seen["staff"][0], seen["staff"][3]
    assert "STAFFPUMP" in retrieved and "STAFFPUMP" in prompted  # the staff member's context is not empty
    for part in seen["staff"]:
        assert "HRSECRET" not in part and "Salaries are paid" not in part

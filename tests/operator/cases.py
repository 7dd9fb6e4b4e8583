"""Invalid RAGEngine specs shared by the unit tests (pydantic) and the API-server tests (CRD + CEL).

Each case: (id, spec, text the API server's error must contain, also rejected by spec.py?).
"""

from __future__ import annotations

from typing import Any

GOOD_MODEL = {"inference": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}}
GOOD_URL = {"inference": {"url": "http://llm.example:8000/v1"}}

INVALID: list[tuple[str, dict[str, Any], str, bool]] = [
    ("model-and-url", {"inference": {"model": "m", "url": "http://x/v1"}},
     "exactly one of inference.model or inference.url", True),
    ("neither-model-nor-url", {"inference": {"gpus": 1}}, "exactly one of inference.model or inference.url", True),
    ("url-not-http", {"inference": {"url": "ftp://x/v1"}}, "inference.url must be an http:// or https:// URL", True),
    ("gpus-zero", {"inference": {"model": "m", "gpus": 0}}, "spec.inference.gpus", True),
    ("replicas-negative", {"inference": {"model": "m", "replicas": -1}}, "spec.inference.replicas", True),
    ("context-window-small", {"inference": {"model": "m", "contextWindow": 100}}, "spec.inference.contextWindow", True),
    ("hf-token-in-url-mode", {"inference": {"url": "http://x/v1", "hfTokenSecretRef": {"name": "hf"}}},
     "inference.hfTokenSecretRef applies to inference.model only", True),
    ("api-key-in-model-mode", {"inference": {"model": "m", "apiKeySecretRef": {"name": "k"}}},
     "inference.apiKeySecretRef applies to inference.url only", True),
    ("ratio-low", {"retrieval": {"contextTokenRatio": 0.1}}, "spec.retrieval.contextTokenRatio", True),
    ("ratio-high", {"retrieval": {"contextTokenRatio": 0.9}}, "spec.retrieval.contextTokenRatio", True),
    ("threshold-high", {"retrieval": {"similarityThreshold": 1.5}}, "spec.retrieval.similarityThreshold", True),
    ("threshold-negative", {"retrieval": {"similarityThreshold": -0.1}}, "spec.retrieval.similarityThreshold", True),
    ("hybrid-not-bool", {"retrieval": {"hybrid": "sometimes"}}, "spec.retrieval.hybrid", True),
    ("embedding-model-and-url", {"embedding": {"model": "m", "url": "http://e/v1"}},
     "at most one of embedding.model or embedding.url", True),
    ("embedding-key-without-url", {"embedding": {"apiKeySecretRef": {"name": "k"}}},
     "embedding.apiKeySecretRef needs embedding.url", True),
    ("embedding-url-not-http", {"embedding": {"url": "file:///e"}}, "embedding.url must be an http:// or https:// URL", True),
    ("engine-replicas-two", {"engine": {"replicas": 2}}, "need vectorStore.type postgres or milvus", True),
    ("faiss-autoscaling", {"engine": {"autoscaling": {"maxReplicas": 3}}}, "need vectorStore.type postgres or milvus", True),
    ("postgres-without-secret", {"vectorStore": {"type": "postgres"}}, "vectorStore.connectionSecretRef is required", True),
    ("faiss-with-secret", {"vectorStore": {"connectionSecretRef": {"name": "db"}}},
     "vectorStore.connectionSecretRef is required for postgres and milvus", True),
    ("autoscaling-min-above-max", {"vectorStore": {"type": "postgres", "connectionSecretRef": {"name": "db"}},
                                   "engine": {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}},
     "minReplicas must not exceed maxReplicas", True),
    ("vllm-managed-flag", {"inference": {"model": "m", "args": ["--enable-prefix-caching", "--port=9000"]}},
     "inference.args must not set --port", True),
    ("vllm-api-key-flag", {"inference": {"model": "m", "args": ["--api-key", "x"]}}, "inference.args must not set", True),
    ("vllm-replicas-rwo", {"inference": {"model": "m", "replicas": 2}}, "needs modelCache.accessMode ReadWriteMany", True),
    ("vllm-autoscaling-rwo", {"inference": {"model": "m", "autoscaling": {"maxReplicas": 4}}},
     "needs modelCache.accessMode ReadWriteMany", True),
    ("startup-timeout-garbage", {"inference": {"model": "m", "startupTimeout": "soon"}}, "spec.inference.startupTimeout", True),
    ("startup-timeout-zero", {"inference": {"model": "m", "startupTimeout": "0m"}}, "startupTimeout must be a positive", True),
    ("bad-prefix", {"vectorStore": {"type": "milvus", "connectionSecretRef": {"name": "db"}, "prefix": "Bad-Prefix"}},
     "spec.vectorStore.prefix", True),
    ("storage-size-garbage", {"storage": {"size": "lots"}}, "size must be a positive resource quantity", True),
    ("secret-ref-without-name", {"auth": {"apiKeySecretRef": {"key": "k"}}}, "spec.auth.apiKeySecretRef.name", True),
    ("toleration-bad-operator", {"inference": {"model": "m", "tolerations": [{"key": "a", "operator": "Maybe"}]}},
     "spec.inference.tolerations[0].operator", True),
    ("network-peer-empty", {"engine": {"networkPolicy": {"allowFrom": [{}]}}},
     "peer sets podSelector and/or namespaceSelector, or ipBlock alone", True),
    ("network-peer-ip-and-pods", {"engine": {"networkPolicy": {"allowFrom": [
        {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}}},
     "peer sets podSelector and/or namespaceSelector, or ipBlock alone", True),
    ("network-peer-bad-cidr", {"engine": {"networkPolicy": {"allowFrom": [{"ipBlock": {"cidr": "10.0.0.0"}}]}}},
     "spec.engine.networkPolicy.allowFrom[0].ipBlock.cidr", True),
    ("network-peer-bad-operator", {"engine": {"networkPolicy": {"allowFrom": [
        {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}]}}},
     "spec.engine.networkPolicy.allowFrom[0].podSelector.matchExpressions[0].operator", True),
    ("milvus-replicas-without-sessions-db", {"vectorStore": {"type": "milvus", "connectionSecretRef": {"name": "db"}},
                                             "engine": {"replicas": 3}},
     "with vectorStore.type milvus need sessions.databaseSecretRef", True),
    ("source-two-kinds", {"sources": [{"name": "a", "configMap": {"name": "a"}, "http": {"urls": ["https://x/a"]}}]},
     "a source needs exactly one of configMap, git, http", True),
]

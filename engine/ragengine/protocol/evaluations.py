"""Request and response models of the evaluation routes (``/indexes/{name}/evaluations``) and of the gate a
re-index takes (docs/evaluation.md)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MAX_QUESTION_CHARS = 20_000  # long questions (role-play scenarios: banking-knowledge has 7,368 characters)
MAX_RELEVANT = 100
MAX_ID_CHARS = 256
MAX_REFERENCE_CHARS = 8000


class GoldenQuestion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(..., min_length=1, max_length=MAX_ID_CHARS, description="Unique within the set.")
    question: str = Field(..., min_length=1, max_length=MAX_QUESTION_CHARS)
    relevant_doc_ids: list[str] = Field(
        ..., min_length=1, max_length=MAX_RELEVANT,
        description="The documents (doc_id) that answer it; a document counts at the rank of its best chunk.")
    reference_answer: str | None = Field(None, max_length=MAX_REFERENCE_CHARS,
                                         description="What a good answer says (answer metrics only).")


class RetrievalSettings(BaseModel):
    """What ``/retrieve`` takes, so a run scores exactly what a client with these settings gets."""

    model_config = ConfigDict(extra="forbid")

    top_k: int = Field(10, ge=1, description="max_node_count of /retrieve; the metrics' cutoff k.")
    filters: dict[str, Any] | None = Field(None, description="As /retrieve's filters (OpenAI style).")
    metadata_filter: dict[str, Any] | None = Field(None, description="As /retrieve's metadata_filter.")
    max_chunks_per_document: int | None = Field(None, ge=1, description="As /retrieve's.")
    long_query_windows: bool | None = Field(None, description="As /retrieve's (unset: the engine's setting).")
    min_score: float | None = Field(
        None, ge=0.0, le=1.0, description="Drop results whose score is below this before scoring (the chat's "
        "similarity_threshold does the same to the prompt's context); unset: keep every result.")


class EvaluationRequest(RetrievalSettings):
    questions: list[GoldenQuestion] = Field(..., description="The golden set (docs/evaluation.md).")
    version: int | None = Field(None, ge=1, description="The version scored; default: the live one when the run "
                                "starts. It is scored throughout, even if another version goes live meanwhile.")
    answers: bool = Field(False, description="Also generate answers with the LLM and score them (groundedness, "
                          "relevance, agreement with reference_answer).")


class GateRequest(BaseModel):
    """Swap only when the new version is not worse (docs/evaluation.md)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    metric: str = Field("mrr@10", description="mrr@k, recall@k, ndcg@k or hit_rate@k; k is the set's top_k.")
    minimum: float | None = Field(None, ge=0.0, le=1.0, description="The new version must score at least this.")
    max_regression: float | None = Field(
        None, ge=0.0, le=1.0, alias="maxRegression",
        description="The new version may score at most this much below the live version on the same set.")
    questions: list[GoldenQuestion] | None = Field(None, description="The set, inline (or evaluation_id).")
    evaluation_id: str | None = Field(None, max_length=64, description="Reuse this run's set and settings.")
    settings: RetrievalSettings | None = Field(None, description="With questions: the retrieval settings "
                                               "(default top_k: the metric's k).")


class EvaluationSummary(BaseModel):
    id: str
    index: str
    status: str = Field(description="queued, running, succeeded, failed or interrupted (by a restart).")
    version: int | None = None
    trigger: str = Field(description="api, gate (a gated re-index) or schedule (the engine's evaluation file).")
    progress: dict[str, int]
    metrics: dict[str, Any] | None = None
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    error: str | None = None


class EvaluationOut(EvaluationSummary):
    settings: dict[str, Any]
    missing_doc_ids: dict[str, Any] | None = Field(
        None, description="Relevant doc ids the version does not hold (count, the first ids, questions hit), and "
        "those it holds but the caller's ACL hides.")
    answer_metrics: dict[str, Any] | None = None
    results: list[dict[str, Any]] | None = Field(None, description="Per question: the rank of the first relevant "
                                                 "document, its scores and the retrieved doc ids.")


class EvaluationList(BaseModel):
    data: list[EvaluationSummary]


class ComparisonOut(BaseModel):
    base: EvaluationSummary
    other: EvaluationSummary
    deltas: dict[str, float] = Field(description="other - base, per metric both runs have.")
    better: list[dict[str, Any]] = Field(description="Questions whose ranking improved in other.")
    worse: list[dict[str, Any]]
    unchanged: int
    only_in_base: list[str]
    only_in_other: list[str]


class GoldenSetUpload(BaseModel):
    """A golden set file handed over by a source's sync (``spec.evaluation.goldenSet.source``)."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(..., min_length=1, max_length=256, description="The spec.sources entry it comes from.")
    path: str = Field(..., min_length=1, max_length=1024, description="The file's path in the source.")
    revision: str | None = Field(None, max_length=256)
    text: str = Field(..., max_length=16 * 1024 * 1024, description="The file: JSON Lines.")


class GoldenSetStored(BaseModel):
    index: str
    source: str
    path: str
    revision: str | None = None
    questions: int

"""spec.evaluation (part of the RAGEngine spec; the CRD schema is generated from it): a golden set the engine
scores an index on, on a schedule and before every re-index swaps (docs/evaluation.md)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from ragengine.evaluation.schedule import parse as parse_schedule

from .types import Name, SpecModel

METRIC = r"^(mrr|recall|ndcg|hit_rate)@[1-9][0-9]{0,2}$"


class ConfigMapKeyRef(SpecModel):
    """A key of a ConfigMap in the RAGEngine's namespace."""

    name: Name
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")] = Field(
        "golden.jsonl", description="Key in the ConfigMap.")


class GoldenSetSourceRef(SpecModel):
    """A file of a spec.sources entry (git or HTTP): the sync hands it to the engine instead of indexing it."""

    name: Annotated[str, Field(max_length=63)] = Field(description="A spec.sources entry's name.")
    path: Annotated[str, Field(min_length=1, max_length=1024)] = Field(
        description="The file's path in the source (git: in the repository; HTTP: the URL). It must be one the "
        "source reads (git.paths); it is never indexed as a document.")


class GoldenSetSpec(SpecModel):
    """Where the golden set is, in JSON Lines: {id, question, relevant_doc_ids, reference_answer?} per line."""

    config_map_ref: ConfigMapKeyRef | None = Field(None, description="A ConfigMap key, mounted into the engine.")
    source: GoldenSetSourceRef | None = Field(None, description="A file of a declared source.")

    @model_validator(mode="after")
    def _one(self) -> GoldenSetSpec:
        if (self.config_map_ref is None) == (self.source is None):
            raise ValueError("evaluation.goldenSet needs exactly one of configMapRef or source")
        return self


class EvaluationGateSpec(SpecModel):
    """Every re-index of the index (spec.embedding, a source's chunking, the API without a gate of its own) swaps
    only when the new version scores at least minimum and at most maxRegression below the live version."""

    metric: Annotated[str, Field(max_length=16, pattern=METRIC)] = Field(
        "mrr@10", description="mrr@k, recall@k, ndcg@k or hit_rate@k; k must be topK.")
    minimum: float | None = Field(None, ge=0.0, le=1.0)
    max_regression: float | None = Field(None, ge=0.0, le=1.0)


class EvaluationSpec(SpecModel):
    """A golden set the engine scores its index on: on a schedule (drift as sources sync), and before every
    re-index swaps (the gate). docs/evaluation.md."""

    golden_set: GoldenSetSpec
    index: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^/\x00-\x1F\x7F]+$")] | None = Field(
        None, description="The index the set is for; default: goldenSet.source's index.")
    top_k: int = Field(10, ge=1, le=300, description="Results per question (the metrics' k).")
    schedule: Annotated[str, Field(max_length=128)] | None = Field(
        None, description="When to score it: a cron schedule (UTC, e.g. '0 3 * * *'), a macro (@daily) or an "
        "interval (@every 6h); unset: only before re-indexes.")
    gate: EvaluationGateSpec | None = Field(None, description="Unset: re-indexes swap when built, as before.")
    drop_threshold: float | None = Field(
        None, ge=0.0, le=1.0, description="A Warning Event when a run's gate metric falls more than this below the "
        "previous run's; default: gate.maxRegression.")

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str | None) -> str | None:
        if value is not None:
            parse_schedule(value)  # the engine's own reader: a schedule it would refuse is refused here
        return value

    @model_validator(mode="after")
    def _consistent(self) -> EvaluationSpec:
        if self.index is None and self.golden_set.source is None:
            raise ValueError("evaluation.index is required with goldenSet.configMapRef")
        if self.gate is not None and int(self.gate.metric.split("@")[1]) != self.top_k:
            raise ValueError("evaluation.gate.metric's k must equal evaluation.topK")
        return self

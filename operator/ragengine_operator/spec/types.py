"""The base model and scalar types every part of the RAGEngine spec shares."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    """camelCase in YAML, snake_case in Python; unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


Name = Annotated[str, Field(min_length=1, max_length=253)]
Url = Annotated[str, Field(max_length=2048)]
LabelMap = Annotated[dict[str, Annotated[str, Field(max_length=63)]], Field(max_length=64)]
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"  # a namespace's or a source's name

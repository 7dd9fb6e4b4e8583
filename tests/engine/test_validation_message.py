"""``errors.validation_message``: the one place a pydantic (or FastAPI) validation error becomes the line a
caller reads; every route and reader that reports one uses it."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, ValidationError

from ragengine.errors import validation_message, validation_param


class Tool(BaseModel):
    query: str
    top_k: int = Field(5, ge=1)
    filters: dict[str, Any] | None = None


def error_of(data: Any) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        Tool.model_validate(data)
    return info.value


def test_each_error_names_its_field_and_never_the_value():
    exc = error_of({"query": 5, "top_k": -3, "filters": "hunter2"})
    message = validation_message(exc)
    assert message == ("query: Input should be a valid string; top_k: Input should be greater than or equal to 1; "
                       "filters: Input should be a valid dictionary")
    assert "hunter2" not in message and "-3" not in message
    assert validation_param(exc) == "query"  # a model's own field named like a request part stays


def test_within_a_larger_request_and_at_most_limit_errors():
    exc = error_of({"top_k": 0})
    assert validation_message(exc, within="tools[0]") == (
        "tools[0].query: Field required; tools[0].top_k: Input should be greater than or equal to 1")
    assert validation_param(exc, within="tools[0]") == "tools[0].query"
    assert validation_message(exc, limit=1) == "query: Field required"


def test_an_error_without_a_path_is_its_message_alone():
    assert validation_message(error_of([1, 2])) == "Input should be a valid dictionary or instance of Tool"
    assert validation_param(error_of([1, 2])) is None


def test_fastapi_errors_lose_the_body_part_and_the_param_its_source():
    exc = RequestValidationError([
        {"type": "missing", "loc": ("body", "messages"), "msg": "Field required"},
        {"type": "int_parsing", "loc": ("query", "limit"), "msg": "Input should be a valid integer"},
    ])
    assert validation_message(exc) == "messages: Field required; query.limit: Input should be a valid integer"
    assert validation_param(exc) == "messages"
    only_body = RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required"},
                                        {"type": "missing", "loc": ("path", "name"), "msg": "Field required"}])
    assert validation_message(only_body) == "Field required; path.name: Field required"
    assert validation_param(only_body) == "name"

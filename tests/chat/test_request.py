"""The chat request as a typed model: what reaches the LLM is built from it (every field the client set,
the OpenAI fields it does not name included, as sent), and the bounds of ``context_token_ratio`` are one
constant that the setting, the request check and the operator's spec all read."""

from __future__ import annotations

import pytest

from ragengine.chat.plan import resolve_target
from ragengine.errors import BadRequest
from ragengine.protocol.openai import ChatCompletionRequest
from ragengine.settings import CONTEXT_TOKEN_RATIO_MAX, CONTEXT_TOKEN_RATIO_MIN, EngineSettings


def test_upstream_is_what_the_client_set_less_the_engines_fields():
    sent = {"model": "m", "messages": [{"role": "user", "content": "q", "name": "ann"}], "temperature": 0.1,
            "max_tokens": None, "logit_bias": {"42": -100}, "response_format": {"type": "json_object"},
            "index_name": "docs", "context_token_ratio": 0.3, "filters": {"type": "eq", "key": "a", "value": 1},
            "metadata_filter": {"a": 1}, "reformulate": True, "stream_options": None}
    upstream = ChatCompletionRequest.model_validate(sent).upstream()
    assert upstream == {k: v for k, v in sent.items()
                        if k not in ("index_name", "context_token_ratio", "filters", "metadata_filter", "reformulate")}
    assert "stream" not in upstream and "n" not in upstream  # defaults the client did not send stay unsent


def bounds(model: type, field: str = "context_token_ratio") -> tuple[float, float]:
    metadata = model.model_fields[field].metadata
    return (next(m.ge for m in metadata if hasattr(m, "ge")), next(m.le for m in metadata if hasattr(m, "le")))


def test_ratio_bounds_are_one_constant_everywhere():
    from ragengine_operator.spec import RAGEngineSpec

    retrieval_spec = RAGEngineSpec.model_fields["retrieval"].annotation  # spec.retrieval, wherever its model lives
    assert bounds(EngineSettings) == bounds(retrieval_spec) == (CONTEXT_TOKEN_RATIO_MIN, CONTEXT_TOKEN_RATIO_MAX)
    for ratio in (CONTEXT_TOKEN_RATIO_MIN, CONTEXT_TOKEN_RATIO_MAX):
        assert resolve_target(ChatCompletionRequest(messages=[], context_token_ratio=ratio), 0.5).ratio == ratio
    for ratio in (CONTEXT_TOKEN_RATIO_MIN - 0.01, CONTEXT_TOKEN_RATIO_MAX + 0.01):
        with pytest.raises(BadRequest, match="Must be between"):
            resolve_target(ChatCompletionRequest(messages=[], context_token_ratio=ratio), 0.5)

"""The seed's algorithm, example by example (shared/seeds/chat-completion-algorithm.md), as pure functions."""

import pytest

from ragengine.chat.plan import (
    ADDITION_PROMPT_TOKENS,
    NO_USER_PROMPT,
    PROMPT_TOO_LONG,
    build_messages,
    bypass_reason,
    plan_budget,
    reply_max_tokens,
    resolve_target,
    split_messages,
)
from ragengine.errors import BadRequest
from ragengine.protocol.openai import ChatCompletionRequest, upstream_body

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def req(**body) -> ChatCompletionRequest:
    body.setdefault("model", "gpt-4")
    return ChatCompletionRequest.model_validate(body)


# --- bypass rules -------------------------------------------------------------------------------
def test_bypass_no_index():
    r = req(messages=[{"role": "user", "content": "Hello, how are you?"}])
    assert bypass_reason(r, resolve_target(r, 0.5).index_name) == "no_index_name"


@pytest.mark.parametrize("field", ["tools", "functions"])
def test_bypass_tools_or_functions(field):
    r = req(index_name="my_index", messages=[{"role": "user", "content": "What's the weather?"}],
            **{field: [{"type": "function", "function": {"name": "get_weather"}}]})
    assert bypass_reason(r, "my_index") == "tools_or_functions"


@pytest.mark.parametrize("role", ["function", "tool"])
def test_bypass_unsupported_role(role):
    r = req(index_name="my_index", messages=[{"role": role, "content": "Weather data: 75°F"},
                                             {"role": "user", "content": "Thanks!"}])
    assert bypass_reason(r, "my_index") == f"unsupported_role:{role}"


def test_bypass_non_text_user_content():
    r = req(index_name="my_index", messages=[{"role": "user", "content": [
        {"type": "text", "text": "What's in this image?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}]}])
    assert bypass_reason(r, "my_index") == "non_text_content"


def test_text_only_parts_are_rag():
    r = req(index_name="i", messages=[{"role": "user", "content": [{"type": "text", "text": "What is KAITO?"}]}])
    assert bypass_reason(r, "i") is None
    assert split_messages(r.messages).user_prompt == "What is KAITO?"


@pytest.mark.parametrize("messages, error", [
    ([{"content": "hi"}], "Invalid request format: messages must contain 'role'."),
    ([{"role": "user"}], "Invalid request format: messages must contain 'content' for role 'user'."),
    ([{"role": "system", "content": None}, {"role": "user", "content": "x"}],
     "Invalid request format: messages must contain 'content' for role 'system'."),
    ([{"role": "user", "content": "  "}], "Invalid request format: user message content must not be empty."),
])
def test_message_validation(messages, error):
    with pytest.raises(BadRequest) as exc:
        bypass_reason(req(index_name="i", messages=messages), "i")
    assert exc.value.message == error and exc.value.status_code == 400


def test_assistant_without_content_is_fine():
    r = req(index_name="i", messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": None},
                                      {"role": "user", "content": "b"}])
    assert bypass_reason(r, "i") is None


# --- message processing: the seed's four examples -----------------------------------------------
def test_example_1_simple_query():
    split = split_messages([SYSTEM, {"role": "user", "content": "What is KAITO?"}])
    assert split.user_prompt == "What is KAITO?"
    assert split.history == [SYSTEM]


def test_example_2_multi_turn():
    msgs = [SYSTEM, {"role": "user", "content": "What is KAITO?"},
            {"role": "assistant", "content": "KAITO is a Kubernetes operator for AI workloads."},
            {"role": "user", "content": "How do I install it?"}]
    split = split_messages(msgs)
    assert split.user_prompt == "How do I install it?"
    assert split.history == msgs[:3]


def test_example_3_consecutive_user_messages():
    msgs = [SYSTEM, {"role": "user", "content": "What is KAITO?"},
            {"role": "assistant", "content": "KAITO is a Kubernetes operator."},
            {"role": "user", "content": "Tell me more about it."},
            {"role": "user", "content": "Specifically about GPU support."}]
    split = split_messages(msgs)
    assert split.user_prompt == "Tell me more about it.\n\nSpecifically about GPU support."
    assert split.history == msgs[:3]


def test_example_4_no_user_after_assistant():
    with pytest.raises(BadRequest) as exc:
        split_messages([{"role": "user", "content": "What is KAITO?"},
                        {"role": "assistant", "content": "KAITO is a Kubernetes operator."}])
    assert exc.value.message == NO_USER_PROMPT


def test_pseudo_code_walk_keeps_system_after_assistant_in_history():
    # The seed's loop: only an assistant message ends the prompt; a system message in between is history.
    msgs = [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "u1"},
            {"role": "system", "content": "s"}, {"role": "user", "content": "u2"}]
    split = split_messages(msgs)
    assert split.user_prompt == "u1\n\nu2"
    assert split.history == [msgs[0], msgs[2]]


# --- parameters ---------------------------------------------------------------------------------
@pytest.mark.parametrize("ratio", [0.1, 0.0, 0.81, 5.5])
def test_ratio_out_of_range(ratio):
    with pytest.raises(BadRequest) as exc:
        resolve_target(req(index_name="i", messages=[], context_token_ratio=ratio), 0.5)
    assert exc.value.message == f"Invalid context_token_ratio: {ratio}. Must be between 0.2 and 0.8."


def test_ratio_default_and_given():
    assert resolve_target(req(messages=[]), 0.5).ratio == 0.5
    assert resolve_target(req(messages=[], context_token_ratio=0.8), 0.5).ratio == 0.8


def test_model_alias_routes_to_index():
    t = resolve_target(req(model="rag:docs", messages=[]), 0.5)
    assert (t.index_name, t.model) == ("docs", None)
    with pytest.raises(BadRequest):
        resolve_target(req(model="rag:", messages=[]), 0.5)


def test_upstream_body_strips_engine_fields_only():
    body = {"model": "m", "messages": [], "index_name": "i", "context_token_ratio": 0.3, "temperature": 0.1,
            "seed": 7, "response_format": {"type": "json_object"}, "logprobs": True, "future_field": [1]}
    assert upstream_body(body) == {"model": "m", "messages": [], "temperature": 0.1, "seed": 7,
                                   "response_format": {"type": "json_object"}, "logprobs": True, "future_field": [1]}


# --- token validation and budget ----------------------------------------------------------------
def test_prompt_longer_than_window():
    with pytest.raises(BadRequest) as exc:
        plan_budget(window=1000, prompt_tokens=1001, query_tokens=10, max_tokens=None, ratio=0.5,
                    node_token_approximation=500)
    assert exc.value.message == PROMPT_TOO_LONG


def test_seed_excessive_max_tokens_is_lowered():
    # The seed: 8192 window, 500-token prompt, max_tokens 8000 -> 7692.
    b = plan_budget(window=8192, prompt_tokens=500, query_tokens=500, max_tokens=8000, ratio=0.5,
                    node_token_approximation=500)
    assert b.max_tokens == 7692 and b.max_tokens_requested == 8000
    assert b.top_k == 100  # max(100, 7692 / 500 = 15)
    assert b.context_budget == int(min(7692, 8192 - 500 - 150) * 0.5)


def test_seed_token_budget_example():
    # The seed's worked example: 8192 window, 500-token conversation, max_tokens=1000, ratio 0.6 -> 600.
    b = plan_budget(window=8192, prompt_tokens=500, query_tokens=500, max_tokens=1000, ratio=0.6,
                    node_token_approximation=500)
    assert b.context_budget == 600 and b.max_tokens == 1000


def test_top_k_scales_with_free_window():
    b = plan_budget(window=128_000, prompt_tokens=1000, query_tokens=1000, max_tokens=None, ratio=0.5,
                    node_token_approximation=500)
    assert b.top_k == int(127_000 / 500) == 254
    b = plan_budget(window=128_000, prompt_tokens=1000, query_tokens=1000, max_tokens=None, ratio=0.5,
                    node_token_approximation=100)
    assert b.top_k == 1270


def test_no_max_tokens_uses_window():
    b = plan_budget(window=4096, prompt_tokens=20, query_tokens=20, max_tokens=None, ratio=0.5,
                    node_token_approximation=500)
    assert b.context_budget == int((4096 - 20 - 150) * 0.5) and b.max_tokens is None


def test_budget_capped_by_long_history():
    # History of 3000 tokens, query of 10: the seed's formula would give 1868 tokens of context,
    # which cannot fit beside the history; the cap keeps prompt + context inside the window.
    b = plan_budget(window=4096, prompt_tokens=3000, query_tokens=10, max_tokens=None, ratio=0.5,
                    node_token_approximation=500)
    assert b.context_budget == 4096 - 3000 - ADDITION_PROMPT_TOKENS


def test_budget_zero_when_nothing_free():
    b = plan_budget(window=1000, prompt_tokens=900, query_tokens=900, max_tokens=None, ratio=0.5,
                    node_token_approximation=500)
    assert b.context_budget == 0


def test_reply_max_tokens_fits_after_context():
    b = plan_budget(window=8192, prompt_tokens=500, query_tokens=500, max_tokens=8000, ratio=0.5,
                    node_token_approximation=500)
    assert reply_max_tokens(b, 3000) == 8192 - 500 - ADDITION_PROMPT_TOKENS - 3000
    assert reply_max_tokens(b, 0) == 7542
    small = plan_budget(window=8192, prompt_tokens=50, query_tokens=50, max_tokens=100, ratio=0.5,
                        node_token_approximation=500)
    assert reply_max_tokens(small, 50) == 100
    assert reply_max_tokens(plan_budget(window=8192, prompt_tokens=5, query_tokens=5, max_tokens=None, ratio=0.5,
                                        node_token_approximation=500), 10) is None


# --- prompt assembly ----------------------------------------------------------------------------
def test_build_messages_context_in_system_message():
    history = [SYSTEM, {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1", "name": "bot"}]
    out = build_messages(history, "q2", ["chunk one", "chunk two"])
    assert out[0] == {"role": "system", "content": (
        "Use the context information below to assist the user.\n--------------------\n"
        "chunk one\n\nchunk two\n--------------------\nYou are a helpful assistant.")}
    assert out[1:] == [history[1], history[2], {"role": "user", "content": "q2"}]


def test_build_messages_without_system_prompt():
    out = build_messages([], "q", ["c"])
    assert out[0]["role"] == "system" and out[0]["content"].endswith("c\n--------------------\n")
    assert out[1] == {"role": "user", "content": "q"}

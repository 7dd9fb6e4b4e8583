"""Query reformulation: prompt layout, history window, no-LLM and failure behaviour, output cleaning."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from ragengine.llm.client import LLMClient, LLMUnavailable
from ragengine.rag.reformulate import (
    DEFAULT_REFORMULATE_PROMPT,
    build_reformulation_messages,
    clean_output,
    normalise_history,
    reformulate_query,
)
from ragengine.settings import EngineSettings

HISTORY = [
    {"role": "user", "content": "I want something vegetarian"},
    {"role": "assistant", "content": "I can recommend the Mushroom Soup, the Chickpea Risotto and the Creamy Spinach"},
]
FOLLOW_UP = "From those, which is the quickest to cook?"


@dataclass
class FakeLLM:
    reply: str = "Considering the Mushroom Soup, the Chickpea Risotto and the Creamy Spinach, which is the quickest to cook?"
    fail: bool = False
    configured: bool = True
    seen: list = field(default_factory=list)

    async def model_name(self):
        return "m"

    async def chat(self, payload):
        self.seen.append(payload)
        if self.fail:
            raise LLMUnavailable("all down")

        class R:
            body: ClassVar = {"choices": [{"message": {"content": self.reply}}], "usage": {"total_tokens": 5}}
            endpoint = "http://llm/v1"
        return R()


def test_messages_hold_the_seed_prompt_and_only_the_last_n_turns():
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(10)]
    msgs = build_reformulation_messages(DEFAULT_REFORMULATE_PROMPT, history, "latest?", 3)
    assert msgs[0] == {"role": "system", "content": DEFAULT_REFORMULATE_PROMPT}
    assert len(msgs) == 2 and "Do NOT answer the question" in msgs[0]["content"]
    body = msgs[1]["content"]
    assert "turn 6" not in body and all(f"turn {i}" in body for i in (7, 8, 9)) and "Latest question: latest?" in body


def test_long_history_messages_are_cut():
    msgs = build_reformulation_messages("p", [{"role": "user", "content": "x" * 10_000}], "q", 5)
    assert len(msgs[1]["content"]) < 2200


def test_history_accepts_the_seed_message_key_and_drops_other_roles():
    turns = normalise_history([{"role": "user", "message": "hi"}, {"role": "system", "content": "s"},
                               {"role": "tool", "content": "t"},
                               {"role": "assistant", "content": [{"type": "text", "text": "yo"}]}])
    assert turns == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


@pytest.mark.parametrize("raw, expected", [
    ("  Which is quickest?  ", "Which is quickest?"),
    ('"Which is quickest?"', "Which is quickest?"),
    ("Standalone question: Which is quickest?", "Which is quickest?"),
    ("<think>hmm</think>Which is quickest?\nExplanation: ...", "Which is quickest?"),
    ("", None),
    ("x" * 1000, None),
])
def test_clean_output(raw, expected):
    assert clean_output(raw, "which?") == expected


async def test_rewrites_with_history():
    llm = FakeLLM()
    result = await reformulate_query(llm, EngineSettings(), FOLLOW_UP, HISTORY)
    assert result.reformulated and result.query.startswith("Considering the Mushroom Soup")
    assert result.endpoint == "http://llm/v1" and result.history_used == 2
    assert llm.seen[0]["temperature"] == 0 and llm.seen[0]["model"] == "m"


async def test_no_history_means_no_llm_call():
    llm = FakeLLM()
    result = await reformulate_query(llm, EngineSettings(), FOLLOW_UP, [])
    assert (result.query, result.reformulated, result.reason) == (FOLLOW_UP, False, "no history") and llm.seen == []


async def test_without_llm_the_message_is_unchanged_and_says_so():
    llm = LLMClient(EngineSettings())
    try:
        result = await reformulate_query(llm, EngineSettings(), FOLLOW_UP, HISTORY)
    finally:
        await llm.aclose()
    assert result.query == FOLLOW_UP and not result.reformulated and "no LLM configured" in result.reason


async def test_llm_failure_falls_back_to_the_message():
    result = await reformulate_query(FakeLLM(fail=True), EngineSettings(), FOLLOW_UP, HISTORY)
    assert result.query == FOLLOW_UP and not result.reformulated and result.reason.startswith("LLM failed")


async def test_prompt_is_configurable():
    llm = FakeLLM()
    await reformulate_query(llm, EngineSettings(reformulate_prompt="CUSTOM"), FOLLOW_UP, HISTORY)
    await reformulate_query(llm, EngineSettings(), FOLLOW_UP, HISTORY, system_prompt="PER-REQUEST")
    assert [p["messages"][0]["content"] for p in llm.seen] == ["CUSTOM", "PER-REQUEST"]

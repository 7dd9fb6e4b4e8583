"""The token budget of one session message, counted with the served model's tokenizer.

Everything is measured with ``LLMClient.count_tokens`` (vLLM's /tokenize, cached, then a local
tokenizer), never guessed from character counts: the fixed part (instructions, history, the user's
message) is counted as chat messages; what is left of the context window is split between the
answer (``max_tokens`` when the caller set it, else ``1 - context_token_ratio`` of the free space)
and context. History is dropped oldest-first when the fixed part alone does not fit. Inline files
are truncated to what is left, then retrieved chunks fill the rest (chat's ``select_context``:
relevance order, threshold, skip what does not fit; ``rag.context``). The budget is shared across tool calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ragengine.conversations.prompting import InlineDoc, build_messages
from ragengine.errors import BadRequest
from ragengine.rag.context import select_context
from ragengine.settings import EngineSettings

if TYPE_CHECKING:
    from ragengine.llm.client import LLMClient

PER_BLOCK_OVERHEAD = 12  # the "[n] (file, page)" header and separators around each context block
MIN_ANSWER_TOKENS = 64
MIN_INLINE_TOKENS = 32


class Budget:
    def __init__(self, llm: LLMClient, settings: EngineSettings, window: int, max_tokens: int | None) -> None:
        self.llm = llm
        self.settings = settings
        self.window = window
        self.max_tokens = max_tokens
        self.answer_tokens = max_tokens or MIN_ANSWER_TOKENS
        self.remaining = 0
        self.fixed_tokens = 0

    @classmethod
    async def create(cls, llm: LLMClient, settings: EngineSettings, max_tokens: int | None) -> Budget:
        return cls(llm, settings, await llm.context_window(), max_tokens)

    async def fit_history(self, instructions: str, history: list[dict], user_message: str) -> list[dict]:
        """Drop the oldest turns until instructions + history + message leave room to answer."""
        floor = self.max_tokens or MIN_ANSWER_TOKENS
        while True:
            count = await self.llm.count_tokens(build_messages(instructions, "", history, user_message))
            if count + floor <= self.window or not history:
                break
            history = history[1:]
        if count + floor > self.window:
            raise BadRequest(f"The message needs {count} tokens; with room for an answer it does not fit the "
                             f"model's context window of {self.window} tokens.", param="content")
        free = self.window - count
        ratio = self.settings.context_token_ratio
        self.answer_tokens = min(self.max_tokens, free) if self.max_tokens else max(MIN_ANSWER_TOKENS, int(free * (1 - ratio)))
        self.fixed_tokens = count
        self.remaining = max(0, free - self.answer_tokens)
        return history

    async def fit_inline(self, files: list[Any]) -> list[InlineDoc]:
        out = []
        for f in files:
            text = f.text or ""
            need = await self.llm.count_tokens(text) + PER_BLOCK_OVERHEAD
            truncated = False
            for _ in range(6):
                if need <= self.remaining or self.remaining < MIN_INLINE_TOKENS:
                    break
                # Cut proportionally to the measured overshoot, then measure again.
                text = text[: max(0, int(len(text) * (self.remaining / need) * 0.9))]
                need = await self.llm.count_tokens(text) + PER_BLOCK_OVERHEAD
                truncated = True
            if need > self.remaining or not text.strip():
                continue
            self.remaining -= need
            out.append(InlineDoc(f.id, f.filename, text, truncated))
        return out

    async def fit_nodes(self, nodes: list) -> list:
        if not nodes:
            return []
        texts = [n.text for n in nodes]
        many = getattr(self.llm, "count_tokens_many", None)
        counts = await many(texts) if many else [await self.llm.count_tokens(t) for t in texts]
        table = {t: c + PER_BLOCK_OVERHEAD for t, c in zip(texts, counts, strict=True)}
        chosen = select_context(nodes, self.remaining, table.__getitem__, self.settings.similarity_threshold)
        self.remaining -= sum(table[n.text] for n in chosen)
        return chosen

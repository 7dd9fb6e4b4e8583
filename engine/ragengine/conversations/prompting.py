"""Prompt layout for session messages (pure): instructions + context, history, the user's message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragengine.index.places import citation

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant in a conversation about the user's documents. Answer using the context "
    "below; when it does not contain the answer, say that you do not know rather than guessing. Keep "
    "answers concise and mention the file a fact comes from when it helps."
)
TOOLS_SYSTEM_PROMPT = (
    "You are a helpful assistant in a conversation about the user's documents. Use the semantic_search "
    "tool to find passages in the documents attached to this conversation before answering questions "
    "about them; answer only from what the tool returns, and say that you do not know when it returns "
    "nothing relevant."
)
NO_CONTEXT_NOTE = "No document passages were found for this message."


@dataclass(frozen=True)
class InlineDoc:
    """A conversation file still being ingested: its text goes into the prompt directly."""

    file_id: str
    filename: str
    text: str
    truncated: bool = False


def source_label(metadata: dict) -> str:
    """What the prompt calls a passage's source: its citation text ("handbook.pdf, p. 41", index/places.py)."""
    found = metadata.get("citation")
    return found if isinstance(found, str) and found else citation(metadata, str(metadata.get("file_id") or "document"))


def format_context(nodes: list, inline: list[InlineDoc]) -> str:
    blocks = []
    for doc in inline:
        note = " (truncated)" if doc.truncated else ""
        blocks.append(f"[file: {doc.filename}{note}]\n{doc.text.strip()}")
    for i, node in enumerate(nodes, 1):
        blocks.append(f"[{i}] ({source_label(node.metadata)})\n{node.text.strip()}")
    return "\n\n".join(blocks)


def system_message(instructions: str, context: str | None) -> dict[str, Any]:
    if context is None:  # plain chat or tool mode without inline files: instructions only
        return {"role": "system", "content": instructions}
    body = context if context.strip() else NO_CONTEXT_NOTE
    return {"role": "system", "content": f"{instructions}\n\nContext:\n---------------------\n{body}\n---------------------"}


def build_messages(instructions: str, context: str | None, history: list[dict[str, str]], user_message: str) -> list[dict]:
    return [system_message(instructions, context), *history, {"role": "user", "content": user_message}]


def history_turns(messages: list[Any], *, reformulated: bool = False) -> list[dict[str, str]]:
    """Stored messages → OpenAI turns (user/assistant only; empty ones dropped). With ``reformulated``, a
    user message whose answer was given to its standalone rewrite appears as that rewrite (the seed keeps
    the reformulated question in the history; the stored message keeps the user's words)."""
    turns = []
    for i, m in enumerate(messages):
        if m.role not in ("user", "assistant") or not m.content:
            continue
        content = m.content
        if reformulated and m.role == "user" and i + 1 < len(messages) and messages[i + 1].role == "assistant":
            ref = (messages[i + 1].metadata or {}).get("reformulation") or {}
            if ref.get("reformulated") and ref.get("query"):
                content = ref["query"]
        turns.append({"role": m.role, "content": content})
    return turns

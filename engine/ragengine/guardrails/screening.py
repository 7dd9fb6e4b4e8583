"""Retrieved chunks screened before they enter a prompt (the input side, which KAITO does not have).

Which chunks: those of the indexes named by ``RAGENGINE_SCREEN_INDEXES`` (shell-style patterns, ``*`` =
every index), and any chunk whose document opted in with the metadata ``screen_retrieved: "true"`` (a
source's ``screen: true`` in the RAGEngine sets it on its documents). Pure: no I/O.

What happens to a screened chunk, in this order:
- invisible and control characters are stripped (Unicode categories Cf, Co, Cn, and Cc except tab,
  newline and carriage return): text a reader cannot see cannot carry instructions to the model;
- a chunk with prompt-injection phrasing is quarantined: left out of the prompt (never deleted from the
  index). The rules are deterministic phrases, each with the reason it reports: ``ignore_instructions``
  ("ignore all previous instructions"), ``role_override`` ("you are now", "from now on you",
  "developer mode"), ``addresses_assistant`` ("dear AI", "assistant, you must", "if you are an AI"),
  ``prompt_exfiltration`` ("reveal your system prompt") and ``chat_markup`` (``<|im_start|>``,
  ``[INST]``, ``<<SYS>>``). A classifier model would catch paraphrases these miss; none installs
  offline, so none is used.
The answer's ``rag.screening`` (sessions: the reply's ``screening`` metadata) says how many chunks were
screened, stripped and quarantined, and why; never their text.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ragengine.guardrails.metrics import SCREENED_CHUNKS

OPT_IN_KEY = "screen_retrieved"
_KEEP_CONTROLS = frozenset("\t\n\r")
_HIDDEN = frozenset({"Cf", "Co", "Cn"})

_ADDRESSEE = r"(?:AI|assistant|chat ?bot|language model|LLM|GPT|ChatGPT|Claude|Copilot|model)"
_RULES = (
    ("ignore_instructions",
     r"\b(?:ignore|disregard|forget|override|bypass|skip)\b[^.\n]{0,40}?\b(?:previous|prior|above|earlier|preceding|"
     r"all|any|your|the|system|original)\b[^.\n]{0,30}?\b(?:instructions?|prompts?|directions?|rules|guidelines|"
     r"directives?|messages?)\b"),
    ("role_override",
     r"\byou are (?:now|no longer)\b|\bfrom now on,? (?:you|the assistant)\b|\bdeveloper mode\b|\bjailbr(?:eak|oken)\b"
     r"|\bnew (?:system )?instructions?\s*:|\bpretend (?:to be|you are)\b"),
    ("addresses_assistant",
     rf"\b(?:dear|hey|hi|hello|attention|note to(?: the)?|message (?:for|to)(?: the)?|instructions? (?:for|to)(?: the)?)"
     rf"\s+{_ADDRESSEE}s?\b|\b(?:the\s+)?{_ADDRESSEE}s?,\s+(?:you must|you should|please|do not|don't|ignore|always|"
     rf"never)\b|\bif you are an? {_ADDRESSEE}\b|\bas an? {_ADDRESSEE},? you (?:must|should|will)\b"),
    ("prompt_exfiltration",
     r"\b(?:reveal|print|repeat|output|show|leak|disclose)\b[^.\n]{0,30}?\b(?:system prompt|your instructions|"
     r"(?:the )?prompt above|hidden instructions|initial instructions)\b"),
    ("chat_markup",
     r"<\|(?:im_start|im_end|system|endoftext|begin_of_text|start_header_id|eot_id)\|>|\[/?INST\]|<</?SYS>>"),
)
INJECTION_RULES: tuple[tuple[str, re.Pattern], ...] = tuple(
    (reason, re.compile(p, re.IGNORECASE | re.MULTILINE)) for reason, p in _RULES)


def wants_screening(index_name: str | None, metadata: dict | None, patterns: Sequence[str]) -> bool:
    if index_name is not None and any(fnmatch.fnmatchcase(index_name, p) for p in patterns):
        return True
    flag = (metadata or {}).get(OPT_IN_KEY)
    return flag is True or (isinstance(flag, str) and flag.strip().lower() in ("true", "1", "yes"))


def strip_hidden(text: str) -> str:
    if text.isascii() and text.isprintable():
        return text
    return "".join(c for c in text if c in _KEEP_CONTROLS or unicodedata.category(c) not in _HIDDEN | {"Cc"})


def injection_reason(text: str) -> str | None:
    for reason, pattern in INJECTION_RULES:
        if pattern.search(text):
            return reason
    return None


def screen_nodes(nodes: Iterable[Any], index_name: str | None, patterns: Sequence[str],
                 index_of=None) -> tuple[list[Any], dict[str, Any] | None]:
    """(the nodes that may enter the prompt, the ``screening`` report or None when none was screened).
    ``index_of(node)``: the node's index when one list mixes indexes (sessions)."""
    kept: list[Any] = []
    reasons: Counter = Counter()
    screened = stripped = quarantined = 0
    for node in nodes:
        index = index_of(node) if index_of is not None else index_name
        if not wants_screening(index, node.metadata, patterns):
            kept.append(node)
            continue
        screened += 1
        clean = strip_hidden(node.text)
        was_stripped = clean != node.text
        if was_stripped:
            stripped += 1
            reasons["hidden_characters"] += 1
            SCREENED_CHUNKS.labels("stripped", "hidden_characters").inc()
            node = dataclasses.replace(node, text=clean)
        reason = injection_reason(clean)
        if reason is not None:
            quarantined += 1
            reasons[reason] += 1
            SCREENED_CHUNKS.labels("quarantined", reason).inc()
            continue
        if not was_stripped:
            SCREENED_CHUNKS.labels("clean", "").inc()
        kept.append(node)
    if not screened:
        return kept, None
    return kept, {"screened": screened, "stripped": stripped, "quarantined": quarantined, "reasons": dict(reasons)}

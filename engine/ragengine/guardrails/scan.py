"""A ``Policy`` applied to model output: a whole answer (``OutputGuard.check``) or a stream of deltas
(``OutputGuard.stream``). Pure: no I/O, no clock.

Scanners fall into four families, applied in this order whatever their order in the file:

1. ``invisible_text``: per character (Unicode categories Cf, Co, Cn, as llm-guard); stripping first
   means a zero-width space cannot split a secret past the patterns.
2. Pattern scanners (``regex`` search/all, ``ban_substrings``, ``secrets``, ``sensitive``): every rule is
   a regular expression; hits are spans of the text, merged left to right (the longer of two spans that
   start together wins, an overlapped span is dropped), each replaced by its label (``[REDACTED]``,
   ``<EMAIL>``, ``******``) or, for a ``block`` scanner, the whole answer blocked.
3. Whole-answer scanners (``json``, ``regex`` with ``match_type: fullmatch`` or ``is_blocked: false``,
   ``ban_substrings`` with ``contains_all``): they need the complete answer.
4. Limits (``token_limit``, ``reading_time``): the answer is cut (``redact``, and for reading_time only
   with ``truncate: true``) or blocked.

A ``redact`` scanner that finds a violation it cannot remove (invalid JSON without repair, an allow-list
``regex`` that nothing matches, reading_time without truncate) blocks: the text is never sent unchanged
with a "redacted" label (KAITO's streaming path does the same; its non-streaming path sends it unchanged).


Streaming (``OutputStream(guard)``, one choice's deltas) is in ``guardrails/stream.py``, which builds on this
module; the rules' matching that both use (hits, overlaps, replacement) is ``guardrails/spans.py``.
"""

from __future__ import annotations

import functools
import json as jsonlib
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ragengine.guardrails.detectors import encoding, redact_secret, secret_rules
from ragengine.guardrails.policy import (
    SENSITIVE_RULES,
    BanSubstringsConfig,
    InvisibleTextConfig,
    JSONConfig,
    Policy,
    ReadingTimeConfig,
    RegexConfig,
    ScannerSpec,
    SecretsConfig,
    SensitiveConfig,
    TokenLimitConfig,
)
from ragengine.guardrails.spans import Finder, Rule, apply_spans, find_hits, select_spans

REDACTED = "[REDACTED]"
INVISIBLE_CATEGORIES = frozenset({"Cf", "Co", "Cn"})  # llm-guard's InvisibleText
WORDS_PER_MINUTE = 200  # llm-guard's ReadingTime
# llm-guard's JSON scanner's candidate pattern (balanced braces, recursive: the regex module)
JSON_PATTERN = r"(?<!\\)(?:\\\\)*\{(?:[^{}]|(?R))*\}"

# The regex module (6 MiB of Unicode tables) is imported where a policy is compiled or applied, never at import: an
# engine without a policy does not load it (tests/engine/test_startup_imports.py).


@functools.cache
def _json_pattern() -> Any:
    import regex

    return regex.compile(JSON_PATTERN, regex.DOTALL)


@dataclass
class Verdict:
    """What a policy did to one answer. ``hits``: scanner index -> times it acted."""

    text: str
    blocked: bool = False
    hits: Counter = field(default_factory=Counter)
    finish_reason: str | None = None  # "content_filter" (blocked) or "length" (cut by a limit)

    @property
    def action(self) -> str:
        return "block" if self.blocked else "redact" if self.hits else "allow"


def _whole_match(label: str) -> Finder:
    return lambda m: (m.start(), m.end(), label) if m.end() > m.start() else None


def _checked(label: str, check) -> Finder:
    def find(m):
        if m.end() == m.start() or (check is not None and not check(m.group(0))):
            return None
        return m.start(), m.end(), label
    return find


def _secret(confirm, mode: str) -> Finder:
    def find(m):
        text = m.group(0)
        secret = confirm(text) if text else None
        if not secret:
            return None
        offset = text.find(secret)
        start = m.start() + max(offset, 0)
        end = start + len(secret) if offset >= 0 else m.end()
        return start, end, redact_secret(secret if offset >= 0 else text, mode)
    return find


def ban_pattern(cfg: BanSubstringsConfig) -> str:
    import regex

    parts = [regex.escape(s) for s in sorted(cfg.substrings, key=len, reverse=True)]
    if cfg.match_type == "word":  # llm-guard's word match: \b on both sides of each substring
        parts = [rf"\b{p}\b" for p in parts]
    return ("" if cfg.case_sensitive else "(?i)") + "(?:" + "|".join(parts) + ")"


class OutputGuard:
    """A compiled policy. ``warnings``: scanners the compiler had to drop (patterns ``regex`` refuses)."""

    def __init__(self, policy: Policy) -> None:
        import regex

        self.policy = policy
        self.rules: list[Rule] = []
        self.invisible: int | None = None
        self.whole: list[int] = []
        self.limits: list[int] = []
        self.warnings: list[str] = []
        for i, spec in enumerate(policy.scanners):
            try:
                self._compile(i, spec)
            except (regex.error, ValueError) as exc:
                self.warnings.append(f"scanners[{i}] ({spec.type}): cannot be compiled, skipped: {exc}")

    def _compile(self, i: int, spec: ScannerSpec) -> None:
        import regex

        cfg = spec.config
        if isinstance(cfg, InvisibleTextConfig):
            self.invisible = i
        elif isinstance(cfg, RegexConfig):
            if cfg.match_type == "fullmatch" or not cfg.is_blocked:
                for p in cfg.patterns:
                    regex.compile(p)
                self.whole.append(i)
            else:
                self.rules += [Rule(i, regex.compile(p), _whole_match(REDACTED)) for p in cfg.patterns]
        elif isinstance(cfg, BanSubstringsConfig):
            if cfg.contains_all:
                self.whole.append(i)
            else:
                self.rules.append(Rule(i, regex.compile(ban_pattern(cfg)), _whole_match(REDACTED)))
        elif isinstance(cfg, SecretsConfig):
            self.rules += [Rule(i, r.pattern, _secret(r.confirm, cfg.redact_mode)) for r in secret_rules()]
        elif isinstance(cfg, SensitiveConfig):
            # the loosest detector last: digits that are both a phone number and an IPv4 address are an address
            for name in sorted(cfg.detectors, key=list(SENSITIVE_RULES).index):
                pattern, check = SENSITIVE_RULES[name]
                self.rules.append(Rule(i, regex.compile(pattern), _checked(f"<{name.upper()}>", check)))
        elif isinstance(cfg, JSONConfig):
            self.whole.append(i)
        elif isinstance(cfg, (TokenLimitConfig, ReadingTimeConfig)):
            if isinstance(cfg, TokenLimitConfig):
                encoding(cfg.encoding_name, cfg.model_name)  # loads (offline) now, not at the first answer
            self.limits.append(i)

    @property
    def active(self) -> bool:
        return bool(self.rules or self.whole or self.limits or self.invisible is not None)

    def action_of(self, i: int) -> str:
        return self.policy.scanners[i].action

    def report(self, verdicts: list[Verdict]) -> dict[str, Any]:
        """The ``guardrails`` field of an answer: the policy, the action, and per scanner what it did and how
        often. Never the text it removed."""
        hits: Counter = Counter()
        for v in verdicts:
            hits.update(v.hits)
        blocked = any(v.blocked for v in verdicts)
        return {
            "action": "block" if blocked else "redact" if hits else "allow",
            "scanners": [{"type": self.policy.scanners[i].type, "action": self.action_of(i), "count": n}
                         for i, n in sorted(hits.items())],
            "policy": self.policy.digest,
        }

    # --- one whole answer ---------------------------------------------------------------------------
    def check(self, text: str) -> Verdict:
        v = self.redact(text)
        if v.blocked:
            return v
        text = v.text
        for i in self.whole:
            text = self._whole(i, text, v)
            if v.blocked:
                return self._block(v)
        for i in self.limits:
            text = self._limit_whole(i, text, v)
            if v.blocked:
                return self._block(v)
        v.text = text
        return v

    def redact(self, text: str) -> Verdict:
        """A text beside the answer (reasoning, a tool call's arguments, a query the model wrote): the invisible
        characters and the pattern scanners (secrets, PII, banned substrings, regex search), a block scanner's
        match blocking it. Not the whole-answer scanners nor the limits: they judge the answer's own shape."""
        v = Verdict(text)
        text = self._strip(text, v)
        if v.blocked:
            return self._block(v)
        spans = [(*found, rule.scanner, k) for k, rule in enumerate(self.rules) for found in find_hits(rule, text, 0)]
        if any(self.action_of(s[3]) == "block" for s in spans):
            v.hits.update(s[3] for s in spans if self.action_of(s[3]) == "block")
            return self._block(v)
        v.text = apply_spans(text, select_spans(spans), v.hits)
        return v

    def _block(self, v: Verdict) -> Verdict:
        v.blocked, v.text, v.finish_reason = True, self.policy.block_message, "content_filter"
        return v

    def _strip(self, text: str, v: Verdict) -> str:
        if self.invisible is None or text.isascii():
            return text
        kept = [c for c in text if unicodedata.category(c) not in INVISIBLE_CATEGORIES]
        removed = len(text) - len(kept)
        if removed:
            v.hits[self.invisible] += removed
            if self.action_of(self.invisible) == "block":
                v.blocked = True
        return "".join(kept)

    def _whole(self, i: int, text: str, v: Verdict) -> str:
        import regex

        cfg, block = self.policy.scanners[i].config, self.action_of(i) == "block"
        if isinstance(cfg, JSONConfig):
            return _json(cfg, text, v, i, block)
        if isinstance(cfg, RegexConfig):
            patterns = [regex.compile(p) for p in cfg.patterns]
            if not cfg.is_blocked:  # an allow-list: the answer must match one of them
                how = "fullmatch" if cfg.match_type == "fullmatch" else "search"
                if not any(getattr(p, how)(text) for p in patterns):
                    v.hits[i] += 1
                    v.blocked = True  # nothing to redact: the answer is what is wrong
                return text
            if any(p.fullmatch(text) for p in patterns):
                v.hits[i] += 1
                v.blocked = block
                return REDACTED
            return text
        assert isinstance(cfg, BanSubstringsConfig)  # contains_all
        pattern = regex.compile(ban_pattern(cfg))
        found = {m.group(0) if cfg.case_sensitive else m.group(0).lower() for m in pattern.finditer(text)}
        wanted = {s if cfg.case_sensitive else s.lower() for s in cfg.substrings}
        if found >= wanted:
            v.hits[i] += 1
            v.blocked = block
            return pattern.sub(REDACTED, text)
        return text

    def _limit_whole(self, i: int, text: str, v: Verdict) -> str:
        import regex

        cfg, action = self.policy.scanners[i].config, self.action_of(i)
        if isinstance(cfg, TokenLimitConfig):
            enc = encoding(cfg.encoding_name, cfg.model_name)
            ids = enc.encode_ordinary(text)
            if len(ids) <= cfg.limit:
                return text
            cut = enc.decode(ids[: cfg.limit])
            fixable = True
        else:
            assert isinstance(cfg, ReadingTimeConfig)
            starts = [m.start() for m in regex.finditer(r"\S+", text)]
            max_words = int(cfg.max_time * WORDS_PER_MINUTE)
            if len(starts) <= max_words:
                return text
            cut = text[: starts[max_words]]
            fixable = cfg.truncate
        v.hits[i] += 1
        if action == "block" or not fixable:
            v.blocked = True
            return text
        v.finish_reason = "length"
        return cut



def _json(cfg: JSONConfig, text: str, v: Verdict, i: int, block: bool) -> str:
    if not text.strip():
        return text
    valid = invalid = repaired = 0
    for candidate in _json_pattern().findall(text):
        if _is_json(candidate):
            valid += 1
            continue
        if cfg.repair:
            import json_repair

            fixed = json_repair.repair_json(candidate, skip_json_loads=True, return_objects=False)
            if isinstance(fixed, str) and _is_json(fixed):
                text, valid, repaired = text.replace(candidate, fixed), valid + 1, repaired + 1
                continue
        invalid += 1
    if invalid or valid < cfg.required_elements:
        v.hits[i] += 1
        v.blocked = True  # invalid JSON cannot be redacted into valid JSON
    elif repaired:
        v.hits[i] += repaired
        v.blocked = block
    return text


def _is_json(text: str) -> bool:
    try:
        jsonlib.loads(text)
    except ValueError:
        return False
    return True

"""One choice's deltas through an ``OutputGuard`` (``guardrails/scan.py``). Pure: no I/O, no clock.

Streaming: the text of each choice accumulates; what can be released is everything before the first
position where a pattern could still match. ``regex`` partial matching (``partial=True``) tells, for the
text seen so far, whether a match is in progress at the end, so the hold-back is exactly as long as the
longest match in progress: nothing while the tail of the text cannot start any match, a whole PEM block
while one is open. A complete match that ends at the end of the text is held too (more text could
extend it, or turn ``\\b`` false), and so is any earlier position from which a longer alternative could
still match. The released text is therefore always a prefix of what ``check`` returns for the whole
answer (the property ``tests/guardrails/test_stream_property.py`` checks), so no redacted value, nor
any part of it, ever leaves, however the deltas split it. With a whole-answer scanner in the policy the
stream is held to its end. Limits count the released text.
"""

from __future__ import annotations

from ragengine.guardrails.detectors import encoding
from ragengine.guardrails.policy import TokenLimitConfig
from ragengine.guardrails.scan import WORDS_PER_MINUTE, OutputGuard, Verdict
from ragengine.guardrails.spans import Span, apply_spans, find_hits, select_spans


class OutputStream:
    """One choice's deltas through the policy: ``feed`` returns what may be sent now, ``close`` the rest.
    After a block (``verdict.blocked``) or a cut (``verdict.finish_reason == "length"``) both return ''."""

    def __init__(self, guard: OutputGuard, *, patterns_only: bool = False) -> None:
        self.g = guard
        self.whole = bool(guard.whole) and not patterns_only  # hold everything to the end
        self.verdict = Verdict("")
        self.raw = ""  # the answer so far (invisible characters already stripped)
        self.held_whole: list[str] = []  # with a whole-answer scanner: everything, until close
        self.emitted = 0  # raw[:emitted] has been released
        self.pos = [0] * len(guard.rules)  # per rule: positions before it are settled
        self.found: list[Span] = []  # final spans not yet released
        self.sent: list[str] = []
        self.limits = [] if patterns_only else [_LimitState(guard, i) for i in guard.limits]
        self.closed = False

    @property
    def stopped(self) -> bool:
        """Blocked, or cut by a limit: nothing more goes out."""
        return self.verdict.blocked or self.verdict.finish_reason is not None

    @property
    def ended(self) -> bool:
        return self.stopped or self.closed

    @property
    def text(self) -> str:
        """Everything released so far (the block message not included)."""
        return "".join(self.sent)

    def feed(self, piece: str) -> str:
        if self.ended or not piece:
            return ""
        if self.whole:
            self.held_whole.append(piece)
            return ""
        piece = self.g._strip(piece, self.verdict)
        if self.verdict.blocked:
            return self._blocked()
        self.raw += piece
        return self._release(self._advance(final=False))

    def close(self) -> str:
        """The end of the answer: everything still held is settled and released."""
        if self.ended:
            return ""
        self.closed = True
        if self.whole:
            v = self.g.check("".join(self.held_whole))
            self.verdict = v
            if v.blocked:
                return ""
            self.sent.append(v.text)
            return v.text
        return self._release(self._advance(final=True))

    def _blocked(self) -> str:
        self.verdict.blocked, self.verdict.finish_reason = True, "content_filter"
        return ""

    def _advance(self, final: bool) -> int:
        raw, n = self.raw, len(self.raw)
        for k, rule in enumerate(self.g.rules):
            i, hold, p = self.pos[k], None, rule.pattern
            if final:
                self.found += [(*found, rule.scanner, k) for found in find_hits(rule, raw, i)]
                self.pos[k] = n
                continue
            while i < n:
                m = p.search(raw, i, partial=True)
                if m is None:
                    break
                s = m.start()
                if m.partial:
                    hold = s
                    break
                # A complete match at s: it may still grow (it ends at the end), or an earlier position
                # may start a longer alternative once more text comes (regex prefers the complete one).
                hold = next((j for j in range(i, s + 1) if p.fullmatch(raw, j, partial=True) is not None), None)
                if hold is not None:
                    break
                found = rule.find(m)
                if found is not None:
                    self.found.append((*found, rule.scanner, k))
                i = m.end() if found is not None and m.end() > s else s + 1
            self.pos[k] = n if hold is None else hold
        cut = min(self.pos, default=n)
        moved = True
        while moved:  # never cut through a settled span
            moved = False
            for s in self.found:
                if s[0] < cut < s[1]:
                    cut, moved = s[0], True
        return cut

    def _release(self, cut: int) -> str:
        ready = [s for s in self.found if s[0] < cut]
        blocking = [s for s in ready if self.g.action_of(s[3]) == "block"]
        if blocking:
            self.verdict.hits.update(s[3] for s in blocking)
            return self._blocked()
        self.found = [s for s in self.found if s[0] >= cut]
        if cut <= self.emitted:
            return ""
        out = apply_spans(self.raw[self.emitted : cut], select_spans(ready), self.verdict.hits, offset=self.emitted)
        self.emitted = cut
        for limit in self.limits:
            out = limit.take(out, self.verdict)
            if self.verdict.blocked:
                return ""
        if out:
            self.sent.append(out)
        return out


class _LimitState:
    """token_limit / reading_time over the released text, incrementally (exact token counts near the limit)."""

    MARGIN = 16

    def __init__(self, guard: OutputGuard, i: int) -> None:
        self.i, self.cfg, self.action = i, guard.policy.scanners[i].config, guard.action_of(i)
        self.text = ""
        self.count = 0  # tokens (an estimate far from the limit) or words
        self.in_word = False

    def take(self, piece: str, v: Verdict) -> str:
        if isinstance(self.cfg, TokenLimitConfig):
            keep, over, fixable = self._tokens(piece), None, True
            over = keep != piece
        else:
            keep, fixable = self._words(piece), self.cfg.truncate
            over = keep != piece
        if not over:
            self.text += piece
            return piece
        v.hits[self.i] += 1
        if self.action == "block" or not fixable:
            v.blocked, v.finish_reason = True, "content_filter"
            return ""
        v.finish_reason = "length"
        self.text += keep
        return keep

    def _tokens(self, piece: str) -> str:
        cfg = self.cfg
        enc = encoding(cfg.encoding_name, cfg.model_name)
        self.count += len(enc.encode_ordinary(piece))
        if self.count <= cfg.limit - self.MARGIN:
            return piece
        ids = enc.encode_ordinary(self.text + piece)
        self.count = len(ids)
        if len(ids) <= cfg.limit:
            return piece
        allowed = enc.decode(ids[: cfg.limit])
        return allowed[len(self.text):] if allowed.startswith(self.text) else ""

    def _words(self, piece: str) -> str:
        import regex  # loaded by the policy's compilation already (guardrails/scan.py)

        max_words = int(self.cfg.max_time * WORDS_PER_MINUTE)
        for m in regex.finditer(r"\S+", piece):
            if m.start() == 0 and self.in_word:
                continue  # the word the last piece ended in goes on
            self.count += 1
            if self.count > max_words:
                return piece[: m.start()]
        if piece:
            self.in_word = not piece[-1].isspace()
        return piece

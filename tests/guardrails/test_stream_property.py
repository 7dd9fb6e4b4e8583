"""Streaming property: secrets and PII split at random points across deltas never reach the client.

For random answers (filler with near misses, planted credentials and PII, zero-width characters) cut
into random deltas, under KAITO's default policy plus ban_substrings and invisible_text: no delta the
client receives, nor their concatenation, contains a planted value, and the concatenation is exactly
what the policy makes of the whole answer (so the stream holds back nothing it did not have to).
"""

from __future__ import annotations

import random
import string
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ragengine.guardrails.policy import parse_policy
from ragengine.guardrails.scan import OutputGuard
from ragengine.guardrails.stream import OutputStream

POLICY = (Path(__file__).parent / "data" / "kaito-default-policy.yaml").read_text() + """
  - type: ban_substrings
    substrings: [Project Nightingale, internal only]
  - type: invisible_text
"""
GUARD = OutputGuard(parse_policy(POLICY))
FILLER = ["the", "key", "to", "success", "is", "api", "version", "1.2.3", "port", "8080", "call", "us", "at",
          "id", "42", "sk", "ghp", "AKIA", "bearer", "token", "@", "example", "Project", "internal", "2024-01-15",
          "uuid", "123e4567-e89b-12d3-a456-426614174000", "-----BEGIN", "key:", "\n", ".", ",", "(", ")", "-"]


def _alnum(rng: random.Random, n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _card(rng: random.Random) -> str:
    digits = [4] + [rng.randint(0, 9) for _ in range(14)]
    total = sum(d if i % 2 else (d * 2 - 9 if d > 4 else d * 2) for i, d in enumerate(reversed(digits)))
    digits.append((10 - total % 10) % 10)
    s = "".join(map(str, digits))
    return " ".join(s[i:i + 4] for i in range(0, 16, 4))


PLANTS = {
    "aws": lambda r: "AKIA" + _alnum(r, 16, string.ascii_uppercase + "234567"),
    "github": lambda r: "ghp_" + _alnum(r, 36),
    "openai_style": lambda r: "sk-" + _alnum(r, 32),
    "bearer": lambda r: "Bearer " + _alnum(r, 40),
    "email": lambda r: f"{_alnum(r, 6, string.ascii_lowercase)}.{_alnum(r, 4, string.ascii_lowercase)}@"
                       f"{_alnum(r, 7, string.ascii_lowercase)}.com",
    "card": _card,
    "ipv4": lambda r: ".".join(str(r.randint(11, 250)) for _ in range(4)),
    "phone": lambda r: f"+1 ({r.randint(201, 989)}) {r.randint(201, 989)}-{r.randint(1000, 9999)}",
    "banned": lambda r: r.choice(["Project Nightingale", "INTERNAL ONLY"]),
    "pem": lambda r: "-----BEGIN PRIVATE KEY-----\n" + _alnum(r, 64) + "\n" + _alnum(r, 40)
                     + "\n-----END PRIVATE KEY-----",
}


def make_answer(rng: random.Random) -> tuple[str, list[str]]:
    parts, planted = [], []
    for _ in range(rng.randint(5, 40)):
        if rng.random() < 0.2:
            kind = rng.choice(sorted(PLANTS))
            value = PLANTS[kind](rng)
            planted.append(value if kind != "bearer" else value.split()[1])
            parts += [value, rng.choice(["and", "or", ";"])]  # two numbers side by side read as one (KAITO's too)
        else:
            parts.append(rng.choice(FILLER))
        if rng.random() < 0.05:
            parts.append(rng.choice(["\u200b", "\u2060", "\ufeff"]))
    return " ".join(parts), planted


def cut(rng: random.Random, text: str) -> list[str]:
    points = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(0, len(text) // 2))))
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@settings(max_examples=400, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_no_delta_nor_concatenation_contains_a_redacted_value(seed):
    rng = random.Random(seed)
    answer, planted = make_answer(rng)
    whole = GUARD.check(answer)
    assert not whole.blocked
    for value in planted:
        assert value.lower() not in whole.text.lower(), f"the detectors missed {value!r}"
    stream = OutputStream(GUARD)
    sent = [stream.feed(piece) for piece in cut(rng, answer)] + [stream.close()]
    joined = "".join(sent)
    assert joined == whole.text
    for value in planted:
        assert all(value.lower() not in piece.lower() for piece in sent)
        assert value.lower() not in joined.lower()

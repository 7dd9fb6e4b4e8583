"""KAITO's policy files parse unchanged, with KAITO's permissive rules (guardrails/policy.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragengine.guardrails.policy import (
    DEFAULT_BLOCK_MESSAGE,
    BanSubstringsConfig,
    PolicyError,
    RegexConfig,
    SecretsConfig,
    SensitiveConfig,
    TokenLimitConfig,
    parse_policy,
)
from ragengine.guardrails.scan import OutputGuard

DATA = Path(__file__).parent / "data"


def test_kaito_default_template_parses_unchanged():
    policy = parse_policy((DATA / "kaito-default-policy.yaml").read_bytes())
    assert policy.warnings == ()
    assert [(s.type, s.action) for s in policy.scanners] == [("regex", "redact"), ("secrets", "redact"),
                                                             ("sensitive", "redact")]
    assert isinstance(policy.scanners[0].config, RegexConfig) and len(policy.scanners[0].config.patterns) == 6
    assert policy.scanners[1].config == SecretsConfig(redact_mode="partial")  # written redactMode: camelCase
    assert policy.scanners[2].config == SensitiveConfig(("email", "phone", "credit_card", "ip_address"))
    assert policy.block_message == "The model output was blocked by output guardrails."
    assert OutputGuard(policy).warnings == []


@pytest.mark.parametrize("name", ["kaito-invisible_text_token_limit_policy.yaml", "kaito-json_reading_time_policy.yaml"])
def test_kaito_test_policies_parse(name):
    policy = parse_policy((DATA / name).read_bytes())
    assert policy.warnings == () and len(policy.scanners) == 2 and policy.action == "redact"
    assert OutputGuard(policy).active


def test_permissive_parsing_skips_bad_scanners_and_keeps_the_good_ones():
    policy = parse_policy("""
action: block
blockMessage: Nope.
scanners:
  - type: toxicity            # a model scanner: unknown here, skipped
    threshold: 0.5
  - type: regex
    patterns: ['(']           # not a regular expression: skipped
  - type: BanSubstrings       # camelCase type, as KAITO normalises
    substrings: [secret plan]
    caseSensitive: true
  - type: regex
    action: shout             # invalid action: the default (block)
    patterns: ['\\d{3}-\\d{4}']
  - type: invisible_text
    extra: 1                  # invisible_text takes no fields: skipped
  - type: token-limit
    limit: 0                  # not positive: skipped
  - "not a mapping"
  - type: sensitive
    action: redact
    detectors: [email, ssn]   # unknown detector: skipped
""")
    assert [(s.type, s.action) for s in policy.scanners] == [("ban_substrings", "block"), ("regex", "block")]
    assert policy.scanners[0].config == BanSubstringsConfig(("secret plan",), "word", True, False)
    assert policy.block_message == "Nope."
    text = " | ".join(policy.warnings)
    for expected in ("unknown scanner type 'toxicity'", "not a valid regular expression", "invalid action 'shout'",
                     "invisible_text does not accept", "'limit' must be a positive integer", "not a mapping",
                     "['ssn']"):
        assert expected in text


def test_defaults_and_scanner_action_wins_over_the_top_level_one():
    policy = parse_policy("scanners:\n  - type: secrets\n  - type: token_limit\n    action: block\n")
    assert policy.action == "redact" and policy.block_message == DEFAULT_BLOCK_MESSAGE
    assert [(s.type, s.action) for s in policy.scanners] == [("secrets", "redact"), ("token_limit", "block")]
    assert policy.scanners[1].config == TokenLimitConfig(4096, "cl100k_base", None)
    assert parse_policy("").scanners == () and parse_policy("scanners:\n").scanners == ()


@pytest.mark.parametrize("text, message", [
    ("scanners: [", "not valid YAML"),
    ("- type: regex\n", "top level must be a mapping"),
    (b"\xff\xfe", "not valid YAML"),
])
def test_unusable_files_raise(text, message):
    with pytest.raises(PolicyError, match=message):
        parse_policy(text)


def test_quoted_booleans_are_refused_not_inverted():
    policy = parse_policy("scanners:\n  - type: ban_substrings\n    substrings: [x]\n    case_sensitive: 'false'\n")
    assert policy.scanners == () and "must be a boolean" in policy.warnings[0]

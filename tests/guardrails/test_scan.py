"""Each scanner on whole answers (OutputGuard.check), and the stream's hold-back (OutputGuard.stream)."""

from __future__ import annotations

import json

from ragengine.guardrails.detectors import encoding
from ragengine.guardrails.policy import parse_policy
from ragengine.guardrails.scan import OutputGuard
from ragengine.guardrails.stream import OutputStream

AWS = "AKIAIOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2 + "kLmN"


def guard(yaml_text: str) -> OutputGuard:
    policy = parse_policy(yaml_text)
    assert policy.warnings == (), policy.warnings
    return OutputGuard(policy)


def test_regex_redacts_every_match_of_every_pattern():
    # KAITO's default match_type 'search' redacts the first match of the first pattern only (llm-guard's Regex);
    # the second key would leak. Here every match goes.
    g = guard("scanners:\n  - type: regex\n    patterns: ['\\bAKIA[0-9A-Z]{16}\\b', 'sk-[a-z]{8}']\n")
    v = g.check(f"one {AWS} two AKIAJJJJJJJJJJJJJJJJ three sk-abcdefgh.")
    assert v.text == "one [REDACTED] two [REDACTED] three [REDACTED]." and v.action == "redact"
    assert g.report([v]) == {"action": "redact", "policy": g.policy.digest,
                             "scanners": [{"type": "regex", "action": "redact", "count": 3}]}


def test_ban_substrings_word_match_and_block():
    g = guard("blockMessage: Blocked.\nscanners:\n  - type: ban_substrings\n    action: block\n"
              "    substrings: [Internal Only]\n")
    assert g.check("This is internal only material.").text == "Blocked."
    assert g.check("This is internal only material.").finish_reason == "content_filter"
    assert g.check("Uninternal onlyness is fine.").action == "allow"  # word boundaries
    g = guard("scanners:\n  - type: ban_substrings\n    match_type: str\n    substrings: [cat]\n")
    assert g.check("concatenate").text == "con[REDACTED]enate"


def test_secrets_uses_detect_secrets_plugins_and_filters():
    g = guard("scanners:\n  - type: secrets\n")
    v = g.check(f"token {GITHUB} and aws {AWS} and sendgrid "
                "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 done")
    assert GITHUB not in v.text and AWS not in v.text and "SG.ngeV" not in v.text and v.text.count("******") == 3
    # a UUID, a sha256, a sequential string and code that says "key" are not secrets
    clean = ("id 123e4567-e89b-12d3-a456-426614174000, digest "
             "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, ABCDEFGHIJKLMNOPQRSTUVWXYZ, "
             "`api_key = os.environ['API_KEY']`")
    assert g.check(clean).action == "allow"
    partial = guard("scanners:\n  - type: secrets\n    redactMode: partial\n").check(f"x {AWS} y").text
    assert partial == "x AK..LE y"


def test_private_key_block_is_removed_whole():
    key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq\nZm9vYmFy\n-----END RSA PRIVATE KEY-----"
    v = guard("scanners:\n  - type: secrets\n").check(f"Here:\n{key}\nDone.")
    assert v.text == "Here:\n******\nDone." and "MIIE" not in v.text


def test_sensitive_detectors_with_luhn_and_ipv4_checks():
    g = guard("scanners:\n  - type: sensitive\n")
    v = g.check("Mail jane.doe@example.org, call +1 (415) 555-0132, card 4111 1111 1111 1111, host 192.168.10.20.")
    assert v.text == "Mail <EMAIL>, call <PHONE>, card <CREDIT_CARD>, host <IP_ADDRESS>."
    near = g.check("card 4111 1111 1111 1112 and version 999.1.2.3").text  # Luhn fails; not an IPv4
    assert "<CREDIT_CARD>" not in near and "<IP_ADDRESS>" not in near
    # a refused match does not hide a hit inside it: the card after "UE15" (KAITO's finditer misses it)
    assert g.check("token UE15 4022 5841 9720 7698 end").text == "token UE15 <CREDIT_CARD> end"


def test_invisible_text_is_stripped_before_the_patterns_run():
    g = guard("scanners:\n  - type: regex\n    patterns: ['\\bAKIA[0-9A-Z]{16}\\b']\n  - type: invisible_text\n")
    v = g.check("key AKIA\u200bIOSFODNN7\u2060EXAMPLE!")
    assert v.text == "key [REDACTED]!" and v.hits == {1: 2, 0: 1}


def test_json_repair_and_unrepairable_json_blocks():
    g = guard("scanners:\n  - type: json\n    required_elements: 1\n")
    v = g.check('Result: {"a": 1, "b": [1, 2}')  # llm-guard's candidates are brace-balanced
    assert json.loads(v.text[len("Result: "):]) == {"a": 1, "b": [1, 2]} and v.action == "redact"
    assert g.check("no json here").blocked  # required_elements 1
    assert guard("scanners:\n  - type: json\n    repair: false\n").check('x {"a": ,}').blocked


def test_reading_time_truncates_or_blocks():
    words = " ".join(f"w{i}" for i in range(100))
    v = guard("scanners:\n  - type: reading_time\n    max_time: 0.1\n    truncate: true\n").check(words)
    assert v.text.split() == [f"w{i}" for i in range(20)] and v.finish_reason == "length"
    assert guard("scanners:\n  - type: reading_time\n    max_time: 0.1\n").check(words).blocked  # cannot redact


def test_token_limit_bounds_an_oversized_answer():
    g = guard("scanners:\n  - type: token_limit\n    limit: 50\n")
    answer = "The quick brown fox jumps over the lazy dog. " * 40
    v = g.check(answer)
    enc = encoding()
    assert len(enc.encode_ordinary(v.text)) == 50 and answer.startswith(v.text) and v.finish_reason == "length"
    stream = OutputStream(g)
    sent = "".join(stream.feed(answer[i:i + 7]) for i in range(0, len(answer), 7)) + stream.close()
    assert len(enc.encode_ordinary(sent)) <= 50 and stream.verdict.finish_reason == "length"
    assert guard("scanners:\n  - type: token_limit\n    limit: 50\n    action: block\n").check(answer).blocked


def test_redaction_never_reaches_the_client_one_character_at_a_time():
    g = guard("scanners:\n  - type: regex\n    patterns: ['\\bAKIA[0-9A-Z]{16}\\b']\n")
    text = f"Your key is {AWS}, keep it."
    stream = OutputStream(g)
    pieces = [stream.feed(c) for c in text] + [stream.close()]
    assert "".join(pieces) == "Your key is [REDACTED], keep it."
    assert not any("AKIA" in p or "EXAMPLE" in p for p in pieces)
    # the hold-back is only what a match in progress needs: the plain prefix went out before the key began
    assert "".join(pieces[: len("Your key is ")]) == "Your key is "


def test_block_in_a_stream_keeps_what_was_released_and_stops():
    g = guard("scanners:\n  - type: ban_substrings\n    action: block\n    substrings: [Do Not Distribute]\n")
    stream = OutputStream(g)
    out = [stream.feed(p) for p in ("Summary: all good. ", "Do Not Dis", "tribute. More")]
    assert "".join(out) == "Summary: all good. " and stream.verdict.blocked and stream.close() == ""


def test_whole_answer_scanners_hold_the_stream_to_its_end():
    g = guard("scanners:\n  - type: json\n")
    stream = OutputStream(g)
    assert stream.feed('{"a": ') == "" and stream.feed("1,}") == ""
    assert stream.close() == '{"a": 1}'

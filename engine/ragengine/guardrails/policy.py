"""KAITO's ``guardrails.yaml`` → a ``Policy`` (pure: no I/O, imports only yaml and re).

The file format is KAITO's, unchanged (``website/docs/rag-output-guardrails.md`` and
``presets/ragengine/guardrails/scanner_schemas.py`` in kaito-project/kaito): top-level ``action``
(default for scanners that omit one: ``redact``), ``blockMessage`` and ``scanners``, each scanner a
``type`` plus its fields. Parsing is permissive exactly where KAITO's is: an unknown scanner type or an
invalid scanner config is skipped with a warning and the valid scanners still run; an invalid action
falls back to the default. Scanner types and field names may be written camelCase or kebab-case
(``redactMode``: KAITO's chart template writes it so) and are normalised to snake_case, as KAITO does.

What is NOT permissive (``PolicyError``; the caller keeps the last good policy): text that is not YAML,
or YAML whose top level is not a mapping. The operator parses ConfigMaps with this same module to set
the RAGEngine's ``GuardrailsPolicy`` condition.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

DEFAULT_BLOCK_MESSAGE = "The model output was blocked by output guardrails."
DEFAULT_ACTION = "redact"
ACTIONS = ("redact", "block")
SENSITIVE_DETECTORS = ("email", "phone", "credit_card", "ip_address")
SECRETS_REDACT_MODES = ("all", "partial", "hash")
REGEX_MATCH_TYPES = ("search", "fullmatch", "all")  # llm-guard's MatchType values
BAN_MATCH_TYPES = ("str", "word")
TOP_LEVEL_KEYS = ("action", "blockMessage", "scanners")


class PolicyError(ValueError):
    """The file cannot be used at all (not YAML, or not a mapping)."""


@dataclass(frozen=True)
class RegexConfig:
    patterns: tuple[str, ...]
    match_type: str = "search"
    is_blocked: bool = True


@dataclass(frozen=True)
class BanSubstringsConfig:
    substrings: tuple[str, ...]
    match_type: str = "word"
    case_sensitive: bool = False
    contains_all: bool = False


@dataclass(frozen=True)
class JSONConfig:
    required_elements: int = 0
    repair: bool = True


@dataclass(frozen=True)
class ReadingTimeConfig:
    max_time: float  # minutes, at llm-guard's 200 words a minute
    truncate: bool = False


@dataclass(frozen=True)
class SecretsConfig:
    redact_mode: str = "all"


@dataclass(frozen=True)
class SensitiveConfig:
    detectors: tuple[str, ...] = SENSITIVE_DETECTORS


@dataclass(frozen=True)
class InvisibleTextConfig:
    pass


@dataclass(frozen=True)
class TokenLimitConfig:
    limit: int = 4096
    encoding_name: str = "cl100k_base"
    model_name: str | None = None


@dataclass(frozen=True)
class ScannerSpec:
    type: str
    action: str
    config: Any


@dataclass(frozen=True)
class Policy:
    scanners: tuple[ScannerSpec, ...] = ()
    action: str = DEFAULT_ACTION
    block_message: str = DEFAULT_BLOCK_MESSAGE
    sha256: str = ""
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def digest(self) -> str:
        """Short id of the file's bytes, reported with every answer the policy touched."""
        return self.sha256[:12]


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(item for item in value if isinstance(item, str) and item)


def _bool(raw: dict, name: str, default: bool) -> bool:
    value = raw.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    # bool("false") is True: a quoted boolean is refused rather than silently inverted (KAITO's rule)
    raise ValueError(f"{name!r} must be a boolean (true/false), got {value!r}")


def _no_extra(raw: dict, allowed: set[str], scanner: str) -> None:
    extra = sorted(set(raw) - allowed)
    if extra:
        raise ValueError(f"{scanner} does not accept {', '.join(extra)}")


def _regex(raw: dict) -> RegexConfig:
    patterns = _strings(raw.get("patterns"))
    if not patterns:
        raise ValueError("regex requires 'patterns' to be a non-empty list of strings")
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"regex pattern {pattern!r} is not a valid regular expression: {exc}") from None
    match_type = str(raw.get("match_type", "search")).lower()
    if match_type not in REGEX_MATCH_TYPES:
        raise ValueError(f"regex 'match_type' must be one of {sorted(REGEX_MATCH_TYPES)}, got {match_type!r}")
    return RegexConfig(patterns, match_type, _bool(raw, "is_blocked", True))


def _ban_substrings(raw: dict) -> BanSubstringsConfig:
    substrings = _strings(raw.get("substrings"))
    if not substrings:
        raise ValueError("ban_substrings requires 'substrings' to be a non-empty list of strings")
    match_type = str(raw.get("match_type", "word")).lower()
    if match_type not in BAN_MATCH_TYPES:
        raise ValueError(f"ban_substrings 'match_type' must be one of {sorted(BAN_MATCH_TYPES)}, got {match_type!r}")
    return BanSubstringsConfig(substrings, match_type, _bool(raw, "case_sensitive", False),
                               _bool(raw, "contains_all", False))


def _json(raw: dict) -> JSONConfig:
    required = raw.get("required_elements", 0)
    if not isinstance(required, int) or isinstance(required, bool) or required < 0:
        raise ValueError("json 'required_elements' must be a non-negative integer")
    return JSONConfig(required, _bool(raw, "repair", True))


def _reading_time(raw: dict) -> ReadingTimeConfig:
    max_time = raw.get("max_time")
    if isinstance(max_time, bool) or not isinstance(max_time, (int, float)) or max_time <= 0:
        raise ValueError("reading_time 'max_time' must be a positive number (minutes)")
    return ReadingTimeConfig(float(max_time), _bool(raw, "truncate", False))


def _secrets(raw: dict) -> SecretsConfig:
    mode = str(raw.get("redact_mode", "all")).lower()
    if mode not in SECRETS_REDACT_MODES:
        raise ValueError(f"secrets 'redact_mode' must be one of {sorted(SECRETS_REDACT_MODES)}, got {mode!r}")
    return SecretsConfig(mode)


def _sensitive(raw: dict) -> SensitiveConfig:
    value = raw.get("detectors")
    if value is None:
        return SensitiveConfig()
    detectors = [d.lower() for d in _strings(value)]
    if not detectors:
        raise ValueError("sensitive requires 'detectors' to be a non-empty list of strings")
    bad = [d for d in detectors if d not in SENSITIVE_DETECTORS]
    if bad:
        raise ValueError(f"sensitive 'detectors' must be drawn from {sorted(SENSITIVE_DETECTORS)}, got {bad!r}")
    return SensitiveConfig(tuple(dict.fromkeys(detectors)))


def _invisible_text(raw: dict) -> InvisibleTextConfig:
    if raw:
        raise ValueError("invisible_text does not accept any configuration fields")
    return InvisibleTextConfig()


def _token_limit(raw: dict) -> TokenLimitConfig:
    limit = raw.get("limit", 4096)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        raise ValueError("token_limit 'limit' must be a positive integer")
    encoding = raw.get("encoding_name", "cl100k_base")
    if not isinstance(encoding, str) or not encoding:
        raise ValueError("token_limit 'encoding_name' must be a non-empty string")
    model = raw.get("model_name")
    if model is not None and (not isinstance(model, str) or not model):
        raise ValueError("token_limit 'model_name' must be a non-empty string when set")
    return TokenLimitConfig(limit, encoding, model)


SCANNER_TYPES = {
    "regex": _regex,
    "ban_substrings": _ban_substrings,
    "json": _json,
    "reading_time": _reading_time,
    "secrets": _secrets,
    "sensitive": _sensitive,
    "invisible_text": _invisible_text,
    "token_limit": _token_limit,
}


def normalize_key(value: str) -> str:
    """KAITO's ``_normalize_scanner_key``: kebab-case and camelCase to snake_case."""
    value = value.replace("-", "_")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", value).lower()


def _action(value: Any, fallback: str, warnings: list[str]) -> str:
    if not isinstance(value, str) or not value:
        return fallback
    if value.lower() in ACTIONS:
        return value.lower()
    warnings.append(f"invalid action {value!r}: using {fallback!r}")
    return fallback


def parse_policy(text: str | bytes) -> Policy:
    """The policy in ``text``; ``Policy.warnings`` lists what was skipped and why."""
    import yaml  # here: an engine without a policy file never parses YAML

    data = text.encode() if isinstance(text, str) else text
    try:
        loaded = yaml.safe_load(data.decode("utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise PolicyError(f"not valid YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise PolicyError(f"the top level must be a mapping (action, blockMessage, scanners), not {type(loaded).__name__}")
    warnings: list[str] = [f"unknown top-level key {k!r} ignored" for k in loaded if k not in TOP_LEVEL_KEYS]
    default = _action(loaded.get("action"), DEFAULT_ACTION, warnings)
    message = loaded.get("blockMessage")
    block_message = message if isinstance(message, str) and message else DEFAULT_BLOCK_MESSAGE
    scanners: list[ScannerSpec] = []
    raw_scanners = loaded.get("scanners")
    if raw_scanners is not None and not isinstance(raw_scanners, list):
        warnings.append("'scanners' must be a list: no scanner loaded")
        raw_scanners = []
    for i, raw in enumerate(raw_scanners or []):
        if not isinstance(raw, dict):
            warnings.append(f"scanners[{i}] is not a mapping: skipped")
            continue
        kind = normalize_key(str(raw.get("type", "")).strip())
        if not kind:
            warnings.append(f"scanners[{i}] has no type: skipped")
            continue
        build = SCANNER_TYPES.get(kind)
        if build is None:
            warnings.append(f"scanners[{i}]: unknown scanner type {kind!r} skipped")
            continue
        action = _action(raw.get("action"), default, warnings)
        fields = {normalize_key(str(k)): v for k, v in raw.items() if k not in ("type", "action")}
        try:
            config = build(fields)
        except (TypeError, ValueError) as exc:
            warnings.append(f"scanners[{i}] ({kind}): invalid config skipped: {exc}")
            continue
        scanners.append(ScannerSpec(kind, action, config))
    return Policy(tuple(scanners), default, block_message, hashlib.sha256(data).hexdigest(), tuple(warnings))


# --- sensitive detectors (KAITO's own patterns and checks, scanner_schemas.py) -------------------------
EMAIL = r"\b[a-zA-Z0-9._%+\-]+@[a-zA-Z0-9.\-]+\.[A-Za-z]{2,}\b"
PHONE = r"(?<!\w)(?:\+?\d[\d().\- ]{8,}\d)(?!\w)"
CREDIT_CARD = r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)"
IPV4 = r"\b(?:\d{1,3}\.){3}\d{1,3}\b"


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def phone_ok(candidate: str) -> bool:
    digits = re.sub(r"\D", "", candidate)
    return 10 <= len(digits) <= 15 and any(sep in candidate for sep in " +-.()")


def card_ok(candidate: str) -> bool:
    digits = re.sub(r"\D", "", candidate)
    return 13 <= len(digits) <= 19 and luhn_ok(digits)


def ipv4_ok(candidate: str) -> bool:
    try:
        return ipaddress.ip_address(candidate).version == 4
    except ValueError:
        return False


SENSITIVE_RULES = {  # detector -> (pattern, check of a whole match), the most specific first
    "email": (EMAIL, None),
    "credit_card": (CREDIT_CARD, card_ok),
    "ip_address": (IPV4, ipv4_ok),
    "phone": (PHONE, phone_ok),
}

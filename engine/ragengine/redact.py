"""Credentials out of URLs before they are shown: in probe answers, error messages and logs.

A URL may carry a secret in its userinfo (``https://user:token@host``) or in a query parameter
(``?api_key=...``). ``redact_url`` keeps what an operator needs to recognise the endpoint (scheme,
host, port, path) and masks the rest; ``redact_text`` does that to every URL inside a message (an
exception's text quotes its URL). ``install_log_filter`` puts the same on the loggers of the HTTP
client, which log every request's full URL at INFO.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
# Query parameters that carry credentials in the APIs people put in these URLs (OpenAI-compatible
# proxies, cloud signed URLs, databases); compared case-insensitively, '-' and '_' alike.
SECRET_PARAMS = frozenset({
    "key", "apikey", "api_key", "token", "access_token", "auth", "authorization", "password", "passwd", "pwd",
    "secret", "client_secret", "sig", "signature", "x_amz_signature", "x_amz_credential", "x_amz_security_token",
    "x_goog_signature", "x_goog_credential", "code", "session", "sessionid", "private_token", "jwt", "credential",
})
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]{0,30}://[^\s'\"<>]+")


def _secret_param(name: str) -> bool:
    return name.lower().replace("-", "_") in SECRET_PARAMS


def redact_url(url: str) -> str:
    """``url`` without the password or token in it: userinfo becomes ``***@``, secret-looking query
    values ``***``. Not a URL (or unparsable): returned as it is."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(_secret_param(k) for k, _ in pairs):
                query = urlencode([(k, MASK if _secret_param(k) else v) for k, v in pairs], safe="*")
    except ValueError:
        return url
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """Every URL inside ``text`` through ``redact_url``."""
    return _URL.sub(lambda m: redact_url(m.group(0)), text) if "://" in text else text


class RedactingFilter(logging.Filter):
    """Rewrites a record's message with ``redact_text`` (formatting it first, as a handler would)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format: leave it to the handler to report
            return True
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = RedactingFilter()
HTTP_LOGGERS = ("httpx", "httpcore")


def install_log_filter(names: tuple[str, ...] = HTTP_LOGGERS) -> None:
    """Add the filter to these loggers (idempotent). A logger's filters see the records made there."""
    for name in names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)

"""The engine's log lines: JSON objects, one per line (the default), or plain text (``log_format=text``).

Every record logged while a request is served carries its ``request_id`` and, when tracing is on, the
``trace_id`` and ``span_id`` of the span that was current: the request id is the trace id's partner,
so a line leads to its trace and a trace (its server span's ``ragengine.request_id``) to its lines. The
request middleware (observability/requests.py) writes one ``ragengine.requests`` line per request with
its method, route, path, status and duration. ``configure(format, level)`` installs this on the root
logger (``ragengine serve`` calls it; uvicorn's own access log is off, this one replaces it).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from contextvars import ContextVar
from typing import Any, Literal

from opentelemetry import trace

REQUEST_ID: ContextVar[str | None] = ContextVar("ragengine_request_id", default=None)
# Fields an access line adds to its record (logging's ``extra``), in the order they are written.
ACCESS_FIELDS = ("method", "route", "path", "status", "duration_ms")
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RequestContext(logging.Filter):
    """Adds ``request_id``, ``trace_id`` and ``span_id`` to each record (None outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get()
        if not hasattr(record, "trace_id"):
            ctx = trace.get_current_span().get_span_context()
            record.trace_id = f"{ctx.trace_id:032x}" if ctx.is_valid else None
            record.span_id = f"{ctx.span_id:016x}" if ctx.is_valid else None
        return True


class JSONFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, the request's ids, the
    access fields when present, and the exception's traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("request_id", "trace_id", "span_id", *ACCESS_FIELDS):
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """Plain lines; a record with a request id ends with it (and the trace id)."""

    def __init__(self) -> None:
        super().__init__(_TEXT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid, tid = getattr(record, "request_id", None), getattr(record, "trace_id", None)
        if rid is not None:
            line += f" request_id={rid}" + (f" trace_id={tid}" if tid else "")
        return line


def handler(fmt: Literal["json", "text"], stream: Any = None) -> logging.Handler:
    """A stream handler (stderr by default) writing ``fmt`` lines with the request's ids."""
    out = logging.StreamHandler(stream or sys.stderr)
    out.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    out.addFilter(RequestContext())
    return out


def configure(fmt: Literal["json", "text"], level: str = "info") -> None:
    """The root logger writes ``fmt`` lines at ``level``; uvicorn's loggers go through it."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler(fmt))
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True

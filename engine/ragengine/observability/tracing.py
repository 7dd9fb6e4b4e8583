"""Traces: the engine's spans per request and per stage, exported by the OpenTelemetry SDK as the standard
variables say. Used by the engine, the operator (a source sync's span) and the sync worker.

Contract:

- ``Tracing.from_env(service_name, trace_content)``: on when an OTLP traces endpoint is configured
  (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or ``OTEL_EXPORTER_OTLP_ENDPOINT``) and tracing is not turned
  off (``OTEL_SDK_DISABLED=true``, ``OTEL_TRACES_EXPORTER=none``); else ``Tracing.off()``. The SDK reads the
  rest itself: the sampler (``OTEL_TRACES_SAMPLER``/``_ARG``, default ``parentbased_always_on``), the
  resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), the exporter's headers, timeout and
  certificates, the batching (``OTEL_BSP_*``). ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` (or
  ``OTEL_EXPORTER_OTLP_PROTOCOL``) picks ``grpc`` (the default, as in vLLM) or ``http/protobuf``.
  ``Tracing.to(endpoint, protocol, sampling_ratio, ...)`` is the same from explicit values (the operator
  exports each RAGEngine's sync spans where that RAGEngine's spec says).
- Each ``Tracing`` has its own ``TracerProvider``, never the process-global one: several apps in one
  process each export where they are told, and an app without tracing installs nothing.
- ``activate(tracing)`` makes it the one the stages of the current task use (the request middleware per
  request, the ingestion worker per job). ``stage(name, **attributes)`` opens a child span of the current
  span (None attributes are left out); with no active tracing, or in a request that was not sampled, it
  creates nothing. ``opened(...)`` is the same for a span that outlives a ``with`` block (streams).
- ``content(span, name, text)`` records user content or document text only when ``trace_content`` is
  on; nothing else in the engine puts text into a span.
- ``bound(fn)``: ``fn`` run in a copy of the current context, for thread pools (``run_in_executor``
  does not carry context variables; ``asyncio.to_thread`` does).
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, Span, Status, StatusCode, Tracer

log = logging.getLogger(__name__)

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
PROTOCOLS = ("grpc", "http/protobuf")
SCOPE = "ragengine"
MAX_CONTENT_CHARS = 4096  # one attribute of user content or document text, when trace_content is on

T = TypeVar("T")


def enabled_by(env: Mapping[str, str]) -> bool:
    """Whether ``env`` asks for traces: an OTLP endpoint, and neither switch that turns them off."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() in ("none", ""):
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_VARS)


def tracing_env(endpoint: str, *, protocol: str = "grpc", sampling_ratio: float = 1.0, service_name: str,
                resource: Mapping[str, str] | None = None) -> dict[str, str]:
    """The standard variables that send a process's traces to ``endpoint`` (the operator renders them for
    the engine, vLLM and the sync workers; ``from_env`` reads them back). The sampler is parent-based, so a
    request that comes with a sampling decision (the engine's, to vLLM) keeps it."""
    env = {
        ENDPOINT_VARS[0]: endpoint,
        PROTOCOL_VARS[0]: protocol,
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": f"{sampling_ratio:g}",
        "OTEL_SERVICE_NAME": service_name,
    }
    if resource:
        env["OTEL_RESOURCE_ATTRIBUTES"] = ",".join(f"{k}={v}" for k, v in sorted(resource.items()))
    return env


def protocol_of(env: Mapping[str, str]) -> str:
    value = next((env[name].strip() for name in PROTOCOL_VARS if env.get(name, "").strip()), "grpc")
    if value not in PROTOCOLS:
        raise ValueError(f"{PROTOCOL_VARS[0]}={value!r}: this exporter speaks {' or '.join(PROTOCOLS)}")
    return value


@dataclass(frozen=True)
class Tracing:
    """A TracerProvider of its own (None: tracing off) and whether spans may carry content."""

    provider: Any = None  # opentelemetry.sdk.trace.TracerProvider
    tracer: Tracer | None = None
    trace_content: bool = False

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    @classmethod
    def off(cls) -> Tracing:
        return cls()

    @classmethod
    def from_env(cls, service_name: str, *, trace_content: bool = False,
                 env: Mapping[str, str] | None = None) -> Tracing:
        env = os.environ if env is None else env
        if not enabled_by(env):
            return cls.off()
        return cls._build(service_name, protocol_of(env), None, None, trace_content)

    @classmethod
    def to(cls, endpoint: str, *, protocol: str = "grpc", sampling_ratio: float = 1.0, service_name: str,
           attributes: Mapping[str, str] | None = None) -> Tracing:
        """Traces to ``endpoint`` whatever the process's environment says (the operator's per-RAGEngine spans)."""
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}")
        return cls._build(service_name, protocol, endpoint, ParentBased(TraceIdRatioBased(sampling_ratio)), False,
                          attributes)

    @classmethod
    def _build(cls, service_name: str, protocol: str, endpoint: str | None, sampler: Any, trace_content: bool,
               attributes: Mapping[str, str] | None = None) -> Tracing:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create(dict(attributes or {}))
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: service_name}))  # OTEL_SERVICE_NAME, when set, wins
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

            exporter: Any = GrpcExporter(endpoint=endpoint)
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

            exporter = HttpExporter(endpoint=endpoint)
        provider = TracerProvider(sampler=sampler, resource=resource)  # sampler None: OTEL_TRACES_SAMPLER
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider, provider.get_tracer(SCOPE), trace_content)

    def shutdown(self) -> None:
        """Export what is buffered, then stop (the end of an app or of a worker process)."""
        if self.provider is not None:
            self.provider.shutdown()

    def flush(self, timeout_ms: int = 30_000) -> bool:
        return bool(self.provider.force_flush(timeout_ms)) if self.provider is not None else True


def instrument(client: Any, tracing: Tracing) -> None:
    """A client span per request of ``client`` (an httpx Client or AsyncClient), with the W3C
    ``traceparent`` of the current span in its headers (vLLM's spans join the trace); nothing when off."""
    if tracing.enabled:
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

        HTTPXClientInstrumentor.instrument_client(client, tracer_provider=tracing.provider)


_ACTIVE: ContextVar[Tracing | None] = ContextVar("ragengine_tracing", default=None)


def activate(tracing: Tracing | None) -> Token:
    """Make ``tracing`` the one this task's stages use; ``deactivate(token)`` undoes it."""
    return _ACTIVE.set(tracing if tracing is not None and tracing.enabled else None)


def deactivate(token: Token) -> None:
    _ACTIVE.reset(token)


def active() -> Tracing | None:
    return _ACTIVE.get()


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    return {f"ragengine.{k}" if "." not in k else k: v for k, v in values.items() if v is not None}


def _skip(current: Span) -> bool:
    """A request that was not sampled: its stages would be non-recording too, so none is made."""
    return current.get_span_context().is_valid and not current.is_recording()


@contextmanager
def stage(name: str, *, parent: Any = None, **attributes: Any) -> Iterator[Span]:
    """A span for one stage, current inside the block. Attribute names without a dot get ``ragengine.``;
    ``parent``: an OpenTelemetry Context to start from instead of the current one (a job's origin)."""
    tracing = _ACTIVE.get()
    if tracing is None or tracing.tracer is None or (parent is None and _skip(trace.get_current_span())):
        yield INVALID_SPAN
        return
    with tracing.tracer.start_as_current_span(name, context=parent, attributes=_attributes(attributes)) as span:
        yield span


def opened(name: str, **attributes: Any) -> Span | None:
    """A started span that the caller ends (``end(span)``): a child of the current span, not made current."""
    tracing = _ACTIVE.get()
    if tracing is None or tracing.tracer is None or _skip(trace.get_current_span()):
        return None
    return tracing.tracer.start_span(name, attributes=_attributes(attributes))


def end(span: Span | None, error: BaseException | None = None, /, **attributes: Any) -> None:
    """End ``span`` (None: nothing was started) with more attributes, and the error that ended it."""
    if span is None or not span.is_recording():
        return
    span.set_attributes(_attributes(attributes))
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    span.end()


def annotate(span: Span | None = None, /, **attributes: Any) -> None:
    """Set attributes on ``span`` (default: the current one) when it records."""
    span = span if span is not None else trace.get_current_span()
    if span.is_recording():
        span.set_attributes(_attributes(attributes))


def content(span: Span | None, name: str, text: str | None) -> None:
    """User content or document text, only when the active tracing's ``trace_content`` is on."""
    tracing = _ACTIVE.get()
    if text is None or tracing is None or not tracing.trace_content or span is None or not span.is_recording():
        return
    span.set_attribute(f"ragengine.{name}", text[:MAX_CONTENT_CHARS])


def capturing_content() -> bool:
    tracing = _ACTIVE.get()
    return tracing is not None and tracing.trace_content


def bound(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` run in a copy of the current context (spans in a thread pool join the request's trace)."""
    if _ACTIVE.get() is None:
        return fn
    return functools.partial(contextvars.copy_context().run, fn)


def use(span: Span | None) -> Any:
    """``with use(span):`` makes a span from ``opened`` current for a block (it stays open after)."""
    if span is None:
        return _NULL
    return trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False)


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_NULL = _Null()

"""Wiring the OpenTelemetry SDK's span exporters, for entry points only (library code uses the API).

Configured by the standard variables, read the way the SDK reads them:

- ``OTEL_TRACES_EXPORTER``: a comma-separated list of the SDK's ``opentelemetry_traces_exporter``
  entry points (``otlp``, ``otlp_proto_http``, ``otlp_proto_grpc``, ``console``, or ``none``).
  Unset, it is ``otlp`` when an OTLP endpoint variable is set, else nothing is exported: spans are
  still built (their ids go into the ledger), but a laptop has no collector.
- ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL`` choose what ``otlp``
  means: ``http/protobuf`` (the default the OpenTelemetry specification gives; the Python SDK's own
  auto-configuration alone defaults to gRPC) or ``grpc``.
- Endpoints, headers, timeouts, compression and certificates are read by the exporters
  themselves; resource attributes (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``) by the
  SDK's resource detector.

What cannot be had raises :class:`ExporterConfigError`, one line naming the variable and the extra
to install. A backend that does not take spans is said once (with the reason the exporter logged),
not once per batch and retry; while it stays down, batches are dropped at once instead of each
waiting out the exporter's retries, so an entry point never hangs on exit. The ledger keeps every
event either way.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any, Final

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Event as SpanEvent
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status

from turnwatch.runtime.events import storable_text
from turnwatch.runtime.model import TurnwatchError

GROUP: Final = "opentelemetry_traces_exporter"
# The SDK's own names for the two OTLP exporters, by OTLP protocol (opentelemetry-sdk's
# _configuration does the same mapping, but privately and with a gRPC default).
BY_PROTOCOL: Final[Mapping[str, str]] = {
    "http/protobuf": "otlp_proto_http",
    "grpc": "otlp_proto_grpc",
}
EXTRA: Final[Mapping[str, str]] = {"otlp_proto_http": "otlp", "otlp_proto_grpc": "otlp-grpc"}
# While a backend is down, batches are dropped for this long before the next real attempt.
COOL_DOWN_S: Final = 30.0

Say = Callable[[str], None]


class ExporterConfigError(TurnwatchError):
    """The environment asks for an exporter or protocol that cannot be had (one line)."""


def _stderr(message: str) -> None:
    print(f"turnwatch: {message}", file=sys.stderr, flush=True)


def _protocol(env: Mapping[str, str]) -> tuple[str, str]:
    for var in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = env.get(var, "").strip()
        if value:
            if value not in BY_PROTOCOL:
                known = ", ".join(BY_PROTOCOL)
                raise ExporterConfigError(
                    f"{var}={value!r}: the OTLP exporters speak {known}"
                    + (" (not http/json)" if value == "http/json" else "")
                )
            return var, value
    return "", "http/protobuf"


def exporter_names(env: Mapping[str, str] | None = None) -> list[str]:
    """The entry-point names ``OTEL_TRACES_EXPORTER`` asks for, ``otlp`` resolved by protocol."""
    env = os.environ if env is None else env
    raw = env.get("OTEL_TRACES_EXPORTER")
    if raw is None and (
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        raw = "otlp"
    chosen: list[str] = []
    for item in (raw or "").split(","):
        name = item.strip().lower()
        if name in ("", "none"):
            continue
        if name == "otlp":
            name = BY_PROTOCOL[_protocol(env)[1]]
        if name not in chosen:  # "otlp,otlp_proto_http" is one exporter, not two
            chosen.append(name)
    return chosen


def _load(name: str) -> type[SpanExporter]:
    found = entry_points(group=GROUP, name=name)
    if not found:
        if name in EXTRA:
            raise ExporterConfigError(
                f"OTEL_TRACES_EXPORTER asks for {name}, which is not installed: "
                f"pip install 'turnwatch[{EXTRA[name]}]'"
            )
        known = sorted({*(ep.name for ep in entry_points(group=GROUP)), "otlp", "none"})
        raise ExporterConfigError(
            f"OTEL_TRACES_EXPORTER: no exporter named {name!r} is installed "
            f"(installed: {', '.join(known)})"
        )
    try:
        cls = next(iter(found)).load()
    except ImportError as exc:  # the entry point is there, a library it needs is not
        hint = f": pip install 'turnwatch[{EXTRA[name]}]'" if name in EXTRA else ""
        raise ExporterConfigError(
            f"OTEL_TRACES_EXPORTER asks for {name}, which cannot be loaded ({exc}){hint}"
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, SpanExporter)):
        raise ExporterConfigError(f"OTEL_TRACES_EXPORTER: {name} is not a span exporter")
    return cls


def exporters(env: Mapping[str, str] | None = None) -> list[tuple[str, SpanExporter]]:
    """Each exporter the environment asks for, built with its own reading of the environment."""
    built: list[tuple[str, SpanExporter]] = []
    for name in exporter_names(env):
        cls = _load(name)
        try:
            built.append((name, cls()))
        except Exception as exc:  # a bad endpoint, header or timeout value: the SDK's own words
            raise ExporterConfigError(f"OTEL_TRACES_EXPORTER={name}: {exc}") from None
    return built


def resource(service: str) -> Resource:
    """The SDK's resource (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``), named
    ``service`` unless the environment names it."""
    detected = Resource.create()
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        return detected.merge(Resource({SERVICE_NAME: service}))
    return detected


def tracer_provider(service: str = "turnwatch", *, say: Say = _stderr) -> TracerProvider:
    """A provider with every exporter the environment asks for (or none).

    Raises :class:`ExporterConfigError` before anything is built when an exporter cannot be had.
    """
    built = exporters()
    provider = TracerProvider(resource=resource(service))
    for name, exporter in built:
        provider.add_span_processor(BatchSpanProcessor(Reported(exporter, name, say)))
    return provider


# --- a backend that is down, said once ---


class _Capture(logging.Handler):
    """Takes the exporters' own log records: inside an export they go to the exporter that is
    exporting (said once per outage, see :class:`Reported`); outside one, on to stderr as ever."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        note: Callable[[logging.LogRecord], None] | None = getattr(self.local, "note", None)
        if note is not None:
            note(record)
        elif logging.lastResort is not None:
            logging.lastResort.handle(record)


# Installed on import: this module is imported by entry points only (see the module docstring).
_CAPTURE = _Capture()
_EXPORTER_LOGGER = logging.getLogger("opentelemetry.exporter")
_EXPORTER_LOGGER.addHandler(_CAPTURE)
_EXPORTER_LOGGER.propagate = False


def _reason(record: logging.LogRecord | None) -> str:
    """A record's cause, short: the errno text when there is one."""
    if record is None:
        return "the exporter reported a failure"
    text = record.getMessage()
    if str(record.msg).startswith("Transient error") and record.args:
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        text = f"{args[0]}" + (f": {args[-1]}" if len(args) > 3 else "")
    errno = re.search(r"\[Errno -?\d+\] ([^\"')(]+)", text)
    if errno:
        return errno.group(1).strip()
    return text if len(text) <= 200 else text[:199] + "…"


class Reported(SpanExporter):
    """An SDK exporter whose failures are said once per outage, as the exporter's first retry
    begins; while its backend stays down, batches are dropped at once (for
    :data:`COOL_DOWN_S`) instead of each waiting out the exporter's retries."""

    def __init__(
        self, inner: SpanExporter, name: str, say: Say = _stderr, cool_down_s: float = COOL_DOWN_S
    ) -> None:
        self.inner, self.name, self.say, self.cool_down_s = inner, name, say, cool_down_s
        self.down = False
        self.down_until = 0.0
        self.dropped = 0
        # Message only: the SDK's exporters keep their resolved endpoint there, with no accessor.
        self.endpoint = str(getattr(inner, "_endpoint", "") or "")

    def _where(self) -> str:
        return f"{self.name} to {self.endpoint}" if self.endpoint else self.name

    def _went_down(self, record: logging.LogRecord | None) -> None:
        if not self.down:
            self.down = True
            self.say(
                f"traces: {self._where()} cannot deliver ({_reason(record)}); while it stays "
                f"down spans are dropped, retried every {self.cool_down_s:g} s; the ledger keeps "
                "every event"
            )

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.down and time.monotonic() < self.down_until:
            self.dropped += len(spans)
            return SpanExportResult.FAILURE
        _CAPTURE.local.note = self._went_down
        try:
            result = self.inner.export([encodable(s) for s in spans])
        except Exception as exc:  # an exporter that raises is a failed export, said once too
            self._went_down(logging.makeLogRecord({"msg": str(exc)}))
            result = SpanExportResult.FAILURE
        finally:
            _CAPTURE.local.note = None
        if result is SpanExportResult.SUCCESS:
            if self.down:
                self.down = False
                self.say(f"traces: {self._where()} delivers again")
            return result
        self._went_down(None)
        self.dropped += len(spans)
        self.down_until = time.monotonic() + self.cool_down_s
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()
        if self.dropped:
            self.say(f"traces: {self.dropped} span(s) were not delivered by {self._where()}")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _utf8_value(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, tuple | list) and any(isinstance(v, str) for v in value):
        return tuple(storable_text(v) if isinstance(v, str) else v for v in value)
    return value


def _attrs(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    return {storable_text(k): _utf8_value(v) for k, v in (attrs or {}).items()}


def encodable(span: ReadableSpan) -> ReadableSpan:
    """``span``, or a copy of it whose text UTF-8 can carry. The OTLP encoders raise on a lone
    surrogate: the whole batch (up to 512 spans, of every session) was lost, and the backend
    said down for COOL_DOWN_S."""
    texts = [span.name, *(span.attributes or {}), span.status.description or ""]
    texts += [v for v in (span.attributes or {}).values() if isinstance(v, str)]
    for ev in span.events:
        texts.append(ev.name)
        texts += [v for v in (ev.attributes or {}).values() if isinstance(v, str)]
    if all(storable_text(t) is t for t in texts):
        return span  # the usual case: nothing copied
    status = span.status
    if status.description:
        status = Status(status.status_code, storable_text(status.description))
    return ReadableSpan(
        name=storable_text(span.name),
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_attrs(span.attributes),
        events=[
            SpanEvent(storable_text(e.name), _attrs(e.attributes), e.timestamp) for e in span.events
        ],
        links=span.links,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )

"""The SDK's traces beside turnwatch's: a run's trace id as a W3C ``traceparent``, and the SDK's
function spans as OpenTelemetry spans of that trace."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from agents import add_trace_processor
from agents.tracing import FunctionSpanData, Trace, TracingProcessor
from agents.tracing.spans import Span as SdkSpan
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from turnwatch import names

__all__ = ["FunctionSpans", "traceparent"]


def traceparent(sdk_trace: Any) -> str | None:
    """The SDK's trace (``trace_<32 hex>``) as a W3C ``traceparent``: the stop and turnwatch's
    ``execute_tool`` spans then carry the SDK trace's id, so a backend that also receives the
    SDK's spans (through an OpenTelemetry processor of its own) shows one trace."""
    ids = _trace_ids(getattr(sdk_trace, "trace_id", None))
    return None if ids is None else f"00-{ids[0]:032x}-{ids[1]:016x}-01"


def _trace_ids(sdk_trace_id: object) -> tuple[int, int] | None:
    """The OpenTelemetry trace id of an SDK trace id, and the id of its (virtual) root span:
    the SDK's spans are not OpenTelemetry spans, so the root's id is derived from the trace's."""
    if not isinstance(sdk_trace_id, str) or not sdk_trace_id.startswith("trace_"):
        return None
    hex_id = sdk_trace_id.removeprefix("trace_")
    if (
        len(hex_id) != 32
        or not all(c in "0123456789abcdef" for c in hex_id)
        or set(hex_id) == {"0"}
    ):
        return None
    parent = hashlib.blake2b(sdk_trace_id.encode(), digest_size=8).digest()
    return int(hex_id, 16), int.from_bytes(parent, "big") or 1


class FunctionSpans(TracingProcessor):
    """The SDK's function spans (``FunctionSpanData``) as OpenTelemetry spans
    ``openai_agents.function {name}`` in the OpenTelemetry trace of their run, the one the stop's
    spans join: with the SDK's start, end and error, and its span ids as attributes. The tool's
    input and output are never copied (turnwatch keeps no arguments unless asked). Other SDK
    spans are left to the SDK's exporters.

    :class:`StoppableRunner` installs one, once per process (``add_trace_processor``, beside the
    SDK's own processors); with the SDK's tracing disabled, it sees nothing.
    """

    _installed: FunctionSpans | None = None

    def __init__(self, tracer: trace.Tracer | None = None) -> None:
        self.tracer = tracer or trace.get_tracer("turnwatch.openai_agents")

    @classmethod
    def install(cls) -> FunctionSpans:
        """The process's bridge, added to the SDK's trace processors the first time."""
        if cls._installed is None:
            cls._installed = cls()
            add_trace_processor(cls._installed)
        return cls._installed

    def on_span_end(self, span: SdkSpan[Any]) -> None:
        data = span.span_data
        ids = _trace_ids(span.trace_id)
        if not isinstance(data, FunctionSpanData) or ids is None:
            return
        root = SpanContext(ids[0], ids[1], is_remote=True, trace_flags=TraceFlags(1))
        otel = self.tracer.start_span(
            f"{names.SPAN_SDK_FUNCTION_PREFIX} {data.name}",
            context=trace.set_span_in_context(NonRecordingSpan(root)),
            start_time=_ns(span.started_at),
            attributes={
                names.A_GENAI_TOOL_NAME: data.name,
                names.A_SDK_SPAN_ID: span.span_id,
                names.A_SDK_PARENT_ID: span.parent_id or "",
            },
        )
        error = span.error
        if error:
            otel.set_attribute(names.A_ERROR_TYPE, "tool_error")
            otel.set_status(Status(StatusCode.ERROR, str(error.get("message", ""))))
        otel.end(_ns(span.ended_at))

    def on_trace_start(self, trace: Trace) -> None:
        return

    def on_trace_end(self, trace: Trace) -> None:
        return

    def on_span_start(self, span: SdkSpan[Any]) -> None:
        return

    def shutdown(self) -> None:
        return

    def force_flush(self) -> None:
        return


def _ns(iso: str | None) -> int | None:
    """An SDK timestamp (ISO 8601) as Unix nanoseconds; None leaves the time to the SDK."""
    if not iso:
        return None
    try:
        return int(datetime.fromisoformat(iso).timestamp() * 1e9)
    except ValueError:
        return None

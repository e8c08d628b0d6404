"""OpenTelemetry spans from the event stream: one trace per stop (design §5).

The same builder serves the Python runtime (live) and foreign runtimes (``turnwatch ingest``): it
reads events, never the runtime. Spans get explicit start and end times from the events, and are
never used as context managers, so an abort, which is not an error, leaves the status UNSET.

Shape: ``stop`` (click → processing cleared) → ``agent.abort`` (RPC received → returned) →
``abort.walk`` (walk → settlement) → one ``tools.abort`` per in-flight call (sent → released, linked
to the call's ``execute_tool`` span); ``turn.settle`` (walk → turn settled) under ``agent.abort``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.runtime.model import class_of

_PROPAGATOR = TraceContextTextMapPropagator()
_new_event = tuple.__new__
_RELEASES = {names.TOOL_FINISHED, names.TOOL_RESULT_DISCARDED}
_TOOL_TYPE = {
    "read_only": "function",
    "process": "function",
    "mutating": "function",
    "extension": "extension",
}


def _ns(ev: Event) -> int:
    return int(ev.ts_unix * 1e9)


def _ids(span: Span) -> tuple[str, str]:
    """A span's trace and span ids, as the ledger stores them (hex)."""
    ctx = span.get_span_context()
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


@dataclass(slots=True)
class _Exec:
    """A call's open ``execute_tool`` span, with its ids formatted once for all its events."""

    span: Span
    ids: tuple[str, str]


@dataclass
class _Stop:
    """The open spans of one stop."""

    root: Span
    agent_abort: Span | None = None
    walk: Span | None = None
    settle: Span | None = None
    tools: dict[str, Span] = field(default_factory=dict)


class SpanBuilder:
    """An event transformer: builds spans, and returns the event stamped with its span's ids."""

    def __init__(self, tracer: Tracer | None = None) -> None:
        self.tracer = tracer or trace.get_tracer("turnwatch")
        self._exec: dict[tuple[str, str], _Exec] = {}
        self._class: dict[tuple[str, str], str] = {}
        self._stops: dict[tuple[str, str], _Stop] = {}

    def __call__(self, ev: Event) -> Event:
        if ev.call is not None:
            ids = self._on_call(ev)
        else:
            span = self._observe(ev)
            ids = _ids(span) if span is not None else None
        if ids is None:
            return ev
        # The first eight fields and the two ids, not _replace: this runs for most events.
        return _new_event(Event, ev[:8] + ids)

    def _observe(self, ev: Event) -> Span | None:
        kind = ev.kind
        if ev.turn is None:
            return None
        key = (ev.session, ev.turn)
        stop = self._stops.get(key)
        if kind in (names.STOP_CLICKED, names.ABORT_RPC_RECEIVED) and stop is None:
            if kind == names.ABORT_RPC_RECEIVED and ev.attrs.get("receipt") not in (
                None,
                "accepted",
            ):
                return None  # a join of a stop we never saw begin
            stop = self._stops[key] = _Stop(self._root(ev))
        if stop is None:
            return None
        if kind == names.ABORT_RPC_RECEIVED:
            if stop.agent_abort is None:
                stop.agent_abort = self._child("agent.abort", stop.root, ev, kind=SpanKind.SERVER)
                stop.agent_abort.set_attribute(names.A_SOURCE, str(ev.attrs.get("source", "")))
                if ev.attrs.get("mode"):
                    stop.root.set_attribute(names.A_MODE, str(ev.attrs["mode"]))
            else:
                stop.agent_abort.add_event(
                    "joined", {names.A_SOURCE: str(ev.attrs.get("source", ""))}, timestamp=_ns(ev)
                )
            return stop.agent_abort
        parent = stop.agent_abort or stop.root
        if kind == names.ABORT_WALK_STARTED:
            if stop.walk is None:
                stop.walk = self._child(names.SPAN_ABORT_WALK, parent, ev)
                stop.walk.set_attribute("turnwatch.walk.inflight", int(ev.attrs.get("inflight", 0)))
                stop.settle = self._child(names.SPAN_TURN_SETTLE, parent, ev)
            return stop.walk
        if kind == names.TURN_SETTLED:
            outcome = str(ev.attrs.get("outcome", ""))
            if stop.settle is None:
                stop.settle = self._child(names.SPAN_TURN_SETTLE, parent, ev)
            stop.settle.set_attribute(names.A_OUTCOME, outcome)
            stop.settle.end(_ns(ev))
            stop.root.set_attribute(names.A_OUTCOME, outcome)
            for s in stop.tools.values():
                s.end(_ns(ev))
            if stop.walk is not None:
                stop.walk.end(_ns(ev))
            return stop.settle
        if kind == names.ABORT_RPC_RETURNED:
            if stop.agent_abort is not None and ev.attrs.get("receipt") != "joined":
                stop.agent_abort.set_attribute("turnwatch.receipt", str(ev.attrs.get("receipt")))
                stop.agent_abort.end(_ns(ev))
            return stop.agent_abort
        if kind == names.PROCESSING_CLEARED:
            stop.root.add_event("processing.cleared", timestamp=_ns(ev))
            stop.root.end(_ns(ev))
            del self._stops[key]
            return stop.root
        return None

    def _root(self, ev: Event) -> Span:
        parent_ctx = None
        tp = ev.attrs.get("traceparent")
        if isinstance(tp, str):
            parent_ctx = _PROPAGATOR.extract({"traceparent": tp})
        span = self.tracer.start_span(
            names.SPAN_STOP,
            context=parent_ctx,
            start_time=_ns(ev),
            attributes={
                names.A_SESSION: ev.session,
                names.A_TURN: ev.turn or "",
                names.A_GENAI_CONVERSATION: ev.session,
            },
        )
        span.set_attribute("turnwatch.stop.clicked", ev.kind == names.STOP_CLICKED)
        return span

    def _child(
        self,
        name: str,
        parent: Span,
        ev: Event,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        links: list[Link] | None = None,
    ) -> Span:
        return self.tracer.start_span(
            name,
            context=trace.set_span_in_context(parent),
            start_time=_ns(ev),
            kind=kind,
            links=links,
        )

    def _on_call(self, ev: Event) -> tuple[str, str] | None:
        """The span ids an event of a call is stamped with. Ordered by how often kinds come."""
        assert ev.call is not None
        ck = (ev.session, ev.call)
        kind = ev.kind
        if kind == names.TOOL_REQUESTED:
            self._class[ck] = class_of(ev.tool or "", ev.attrs.get("class")).value
            return None
        if kind == names.TOOL_STARTED:
            ex = self._exec.get(ck)
            if ex is None:
                ex = self._exec[ck] = self._start_exec(ev, ck)
            return ex.ids
        stop = self._stops.get((ev.session, ev.turn or "")) if self._stops else None
        if kind in _RELEASES:
            return self._release(ev, ck, stop)
        if kind == names.TOOL_REFUSED:
            self._class.pop(ck, None)  # never starts, never released: forget it now
            return None
        if stop is not None:
            if kind == names.TOOLS_ABORT_SENT:
                return _ids(self._start_abort(ev, ck, stop))
            if kind == names.TOOL_GRACE_EXPIRED and ev.call in stop.tools:
                stop.tools[ev.call].add_event("grace.expired", timestamp=_ns(ev))
                return _ids(stop.tools[ev.call])
        ex = self._exec.get(ck)
        return ex.ids if ex is not None else None

    def _start_exec(self, ev: Event, ck: tuple[str, str]) -> _Exec:
        cls = self._class.get(ck) or class_of(ev.tool or "").value
        span = self.tracer.start_span(
            f"{names.SPAN_EXECUTE_TOOL_PREFIX} {ev.tool}",
            start_time=_ns(ev),
            kind=SpanKind.INTERNAL,
            attributes={
                names.A_GENAI_OPERATION: names.GENAI_OPERATION_EXECUTE_TOOL,
                names.A_GENAI_TOOL_NAME: ev.tool or "",
                names.A_GENAI_TOOL_CALL_ID: ck[1],
                names.A_GENAI_TOOL_TYPE: _TOOL_TYPE.get(cls, "function"),
                names.A_GENAI_CONVERSATION: ev.session,
                names.A_TOOL_CLASS: cls,
            },
        )
        pid = ev.attrs.get("pid")
        if pid is not None:
            span.set_attribute("process.pid", int(pid))
        return _Exec(span, _ids(span))

    def _start_abort(self, ev: Event, ck: tuple[str, str], stop: _Stop) -> Span:
        ex = self._exec.get(ck)
        links = [Link(ex.span.get_span_context())] if ex is not None else []
        parent = stop.walk or stop.agent_abort or stop.root
        span = self._child(names.SPAN_TOOLS_ABORT, parent, ev, kind=SpanKind.CLIENT, links=links)
        span.set_attributes(
            {
                names.A_GENAI_TOOL_NAME: ev.tool or "",
                names.A_GENAI_TOOL_CALL_ID: ck[1],
                names.A_POLICY: str(ev.attrs.get("policy", "")),
                names.A_TOOL_CLASS: str(ev.attrs.get("class", "")),
            }
        )
        stop.tools[ck[1]] = span
        return span

    def _release(
        self, ev: Event, ck: tuple[str, str], stop: _Stop | None
    ) -> tuple[str, str] | None:
        outcome = str(ev.attrs.get("outcome", ""))
        ex = self._exec.pop(ck, None)
        self._class.pop(ck, None)
        if ex is not None:
            ex.span.set_attribute(names.A_OUTCOME, outcome)
            if outcome == "failed":
                ex.span.set_attribute(names.A_ERROR_TYPE, str(ev.attrs.get("error", "failed")))
            ex.span.end(_ns(ev))
        abort_span = stop.tools.pop(ck[1], None) if stop is not None else None
        if abort_span is not None:
            abort_span.set_attribute(names.A_OUTCOME, outcome)
            if outcome == "failed":  # the abort itself failed: the host could not stop it
                abort_span.set_attribute(names.A_ERROR_TYPE, "tool_failed_during_abort")
            abort_span.end(_ns(ev))
            return _ids(abort_span)
        return ex.ids if ex is not None else None

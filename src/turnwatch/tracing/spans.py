"""OpenTelemetry spans from the event stream: one trace per stop (design §5).

The same builder serves the Python runtime (live) and foreign runtimes (``turnwatch ingest``): it
reads events, never the runtime. Spans get explicit start and end times from the events, and are
never used as context managers, so an abort, which is not an error, leaves the status UNSET.

Shape: ``stop`` (click → processing cleared) → ``agent.abort`` (RPC received → returned) →
``abort.walk`` (walk → settlement) → one ``tools.abort`` per in-flight call (sent → released, linked
to the call's ``execute_tool`` span); ``turn.settle`` (walk → turn settled) under ``agent.abort``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from turnwatch import names
from turnwatch.runtime.events import Event, new_event
from turnwatch.runtime.fold import (
    CallState,
    Fold,
    Move,
    Step,
    Store,
)
from turnwatch.runtime.model import Outcome, Receipt, RecoveryResult, ToolClass

_PROPAGATOR = TraceContextTextMapPropagator()
#: Ended stop roots kept for a browser's late click or idle (the oldest are forgotten).
MAX_ENDED_STOPS = 1024
# gen_ai.tool.type: our own tools are functions; MCP and plugin tools are extensions.
_RECOVERY_FAILED = frozenset({RecoveryResult.FAILED.value, RecoveryResult.REFUSED.value})
_TOOL_TYPE = {c.value: "extension" if c is ToolClass.EXTENSION else "function" for c in ToolClass}


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
    """An event transformer: builds spans, and returns the event stamped with its span's ids.

    It reads the stream through a :class:`~turnwatch.runtime.fold.Fold`, so where a stop begins
    and what releases a call are the same rules the metrics and the ledger use.
    """

    def __init__(self, tracer: Tracer | None = None) -> None:
        self.tracer = tracer or trace.get_tracer("turnwatch")
        # Only for a stream read event by event (``__call__``): a pipeline hands it steps.
        self._fold: Fold | None = None
        self._exec: dict[tuple[str, str], _Exec] = {}
        self._stops: dict[str, _Stop] = {}
        # The last ended stop roots, for a browser's click or idle that arrives after them
        # (bounded: a reader that runs for weeks sees sessions no browser ever reports on).
        self._ended: OrderedDict[str, Span] = OrderedDict()

    def __call__(self, ev: Event) -> Event:
        if self._fold is None:
            self._fold = Fold(Store.for_reader())
        return self.on_step(self._fold(ev))

    def on_step(self, st: Step) -> Event:
        """The step's event, stamped with its span's ids (a pipeline that folds once calls this)."""
        ev, call = st.ev, st.call
        key = (ev.session, call.call) if call is not None else None
        # The call's execute_tool span as it was before this event (its release ends it).
        ex = self._exec.get(key) if key is not None else None
        span: Span | None = None
        for move in st.moves:
            on = self._ON_MOVE.get(move)
            if on is not None:
                span = on(self, st) or span
        ids: tuple[str, str] | None = None
        if span is not None:  # a stop's span, or a tools.abort: stamped with it
            ids = _ids(span)
        elif key is not None:  # any other event of a call: its execute_tool span's ids
            ex = ex or self._exec.get(key)
            ids = ex.ids if ex is not None else None
        if ids is None:
            return ev
        # The first eight fields and the two ids, not _replace: this runs for most events.
        return new_event(Event, ev[:8] + ids)

    # --- the stop ---

    def _on_turn(self, st: Step) -> None:
        # A stop whose spans never closed (its RPC never returned): a new turn ends them.
        left = self._stops.pop(st.ev.session, None)
        self._ended.pop(st.ev.session, None)
        if left is not None:
            _end_all(left, _ns(st.ev))

    def _on_stop(self, st: Step) -> Span:
        stop = self._stops[st.ev.session] = _Stop(self._root(st.ev, Move.RPC not in st.moves))
        return stop.root

    def _on_rpc(self, st: Step) -> Span | None:
        stop = self._stops.get(st.ev.session)
        if stop is None:
            return None
        ev = st.ev
        stop.agent_abort = self._child(names.SPAN_AGENT_ABORT, stop.root, ev, kind=SpanKind.SERVER)
        stop.agent_abort.set_attribute(names.A_SOURCE, str(ev.attrs.get(names.K_SOURCE, "")))
        if ev.attrs.get(names.K_MODE):
            stop.root.set_attribute(names.A_MODE, str(ev.attrs[names.K_MODE]))
        return stop.agent_abort

    def _on_joined(self, st: Step) -> Span | None:
        stop = self._stops.get(st.ev.session)
        if stop is None:
            return None
        span = stop.agent_abort or stop.root
        source = str(st.ev.attrs.get(names.K_SOURCE, ""))
        span.add_event(Receipt.JOINED.value, {names.A_SOURCE: source}, timestamp=_ns(st.ev))
        return span

    def _on_walk(self, st: Step) -> Span | None:
        stop = self._stops.get(st.ev.session)
        if stop is None:
            return None
        parent = stop.agent_abort or stop.root
        stop.walk = self._child(names.SPAN_ABORT_WALK, parent, st.ev)
        stop.walk.set_attribute(names.A_WALK_INFLIGHT, int(st.ev.attrs.get(names.K_INFLIGHT, 0)))
        stop.settle = self._child(names.SPAN_TURN_SETTLE, parent, st.ev)
        return stop.walk

    def _on_settled(self, st: Step) -> Span | None:
        stop = self._stops.get(st.ev.session)
        if stop is None:
            return None
        end, outcome = _ns(st.ev), st.session.outcome or ""
        if stop.settle is None:
            stop.settle = self._child(names.SPAN_TURN_SETTLE, stop.agent_abort or stop.root, st.ev)
        stop.settle.set_attribute(names.A_OUTCOME, outcome)
        stop.settle.end(end)
        stop.root.set_attribute(names.A_OUTCOME, outcome)
        for s in stop.tools.values():
            s.end(end)
        stop.tools.clear()
        if stop.walk is not None:
            stop.walk.end(end)
        return stop.settle

    def _on_returned(self, st: Step) -> Span | None:
        stop = self._stops.get(st.ev.session)
        if stop is None or stop.agent_abort is None:
            return None
        stop.agent_abort.set_attribute(names.A_RECEIPT, str(st.ev.attrs.get(names.K_RECEIPT)))
        stop.agent_abort.end(_ns(st.ev))
        return stop.agent_abort

    def _on_cleared(self, st: Step) -> Span | None:
        stop = self._stops.pop(st.ev.session, None)
        if stop is None:
            return None
        stop.root.add_event(names.PROCESSING_CLEARED, timestamp=_ns(st.ev))
        stop.root.end(_ns(st.ev))
        self._ended[st.ev.session] = stop.root
        self._ended.move_to_end(st.ev.session)
        if len(self._ended) > MAX_ENDED_STOPS:
            self._ended.popitem(last=False)
        return stop.root

    def _on_ui_click(self, st: Step) -> Span | None:
        """The browser's click: of the stop it began, or of the stop its agent.abort began."""
        stop = self._stops.get(st.ev.session)
        if stop is None:  # it arrived after the stop ended: stamped with its trace all the same
            return self._ended.get(st.ev.session)
        if Move.STOP not in st.moves:  # it arrived after the stop began: say when it was
            stop.root.add_event(
                names.STOP_CLICKED,
                {names.A_SOURCE: names.SOURCE_BROWSER},
                timestamp=_ns(st.ev),
            )
        return stop.root

    def _on_ui_idle(self, st: Step) -> Span | None:
        """The browser rendered idle: stamped with its stop's root (the exemplar's trace)."""
        stop = self._stops.get(st.ev.session)
        return stop.root if stop is not None else self._ended.pop(st.ev.session, None)

    def _root(self, ev: Event, clicked: bool) -> Span:
        parent_ctx = None
        tp = ev.attrs.get(names.K_TRACEPARENT)
        if isinstance(tp, str):
            parent_ctx = _PROPAGATOR.extract({"traceparent": tp})  # the W3C header
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
        span.set_attribute(names.A_STOP_CLICKED, clicked)
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

    # --- calls ---

    def _on_started(self, st: Step) -> None:
        assert st.call is not None
        key = (st.ev.session, st.call.call)
        if key not in self._exec:
            self._exec[key] = self._start_exec(st.ev, st.call)

    def _on_abort_sent(self, st: Step) -> Span | None:
        stop = self._stops.get(st.ev.session)
        if stop is None or st.call is None:
            return None
        return self._start_abort(st.ev, st.call, stop)

    def _on_grace_expired(self, st: Step) -> Span | None:
        stop = self._stops.get(st.ev.session)
        span = stop.tools.get(st.call.call) if stop is not None and st.call is not None else None
        if span is not None:
            span.add_event("grace.expired", timestamp=_ns(st.ev))
        return span

    def _start_exec(self, ev: Event, call: CallState) -> _Exec:
        cls = call.tool_class or ToolClass.EXTENSION.value
        tp = ev.attrs.get(names.K_TRACEPARENT)  # the run it belongs to, if a framework said
        span = self.tracer.start_span(
            f"{names.SPAN_EXECUTE_TOOL_PREFIX} {ev.tool}",
            context=_PROPAGATOR.extract({"traceparent": tp}) if isinstance(tp, str) else None,
            start_time=_ns(ev),
            kind=SpanKind.INTERNAL,
            attributes={
                names.A_GENAI_OPERATION: names.GENAI_OPERATION_EXECUTE_TOOL,
                names.A_GENAI_TOOL_NAME: ev.tool or "",
                names.A_GENAI_TOOL_CALL_ID: call.call,
                names.A_GENAI_TOOL_TYPE: _TOOL_TYPE.get(cls, "function"),
                names.A_GENAI_CONVERSATION: ev.session,
                names.A_TOOL_CLASS: cls,
            },
        )
        if call.pid is not None:
            span.set_attribute(names.A_PROCESS_PID, int(call.pid))
        return _Exec(span, _ids(span))

    def _start_abort(self, ev: Event, call: CallState, stop: _Stop) -> Span:
        ex = self._exec.get((ev.session, call.call))
        links = [Link(ex.span.get_span_context())] if ex is not None else []
        parent = stop.walk or stop.agent_abort or stop.root
        span = self._child(names.SPAN_TOOLS_ABORT, parent, ev, kind=SpanKind.CLIENT, links=links)
        span.set_attributes(
            {
                names.A_GENAI_TOOL_NAME: ev.tool or "",
                names.A_GENAI_TOOL_CALL_ID: call.call,
                names.A_POLICY: call.policy or "",
                names.A_TOOL_CLASS: call.tool_class or "",
            }
        )
        stop.tools[call.call] = span
        return span

    def _on_released(self, st: Step) -> Span | None:
        """The call's spans end; the event is stamped with its tools.abort span, if it had one."""
        call, ev = st.call, st.ev
        assert call is not None
        outcome = call.outcome or ""
        failed = outcome == Outcome.FAILED.value
        ex = self._exec.pop((ev.session, call.call), None)
        if ex is not None:
            ex.span.set_attribute(names.A_OUTCOME, outcome)
            if failed:
                _error(ex.span, str(ev.attrs.get(names.K_ERROR, "failed")))
            ex.span.end(_ns(ev))
        stop = self._stops.get(ev.session)
        abort_span = stop.tools.pop(call.call, None) if stop is not None else None
        if (
            abort_span is None
            and stop is not None
            and stop.walk is not None
            and call.started_ts is None
            and call.abort_ts is None
        ):
            # Stopped before it started (at its prompt, or waiting for admission): no tools.abort
            # went to a host, but the walk reached it, and its span says so.
            abort_span = self._start_abort(ev, call, stop)
            abort_span.set_attribute(names.A_BEFORE_START, True)
            stop.tools.pop(call.call, None)
        if abort_span is not None:
            abort_span.set_attribute(names.A_OUTCOME, outcome)
            if failed:  # the abort itself failed: the host could not stop it
                _error(abort_span, "tool_failed_during_abort")
            abort_span.end(_ns(ev))
        return abort_span  # None: stamped with its execute_tool span, as before the release

    # --- the watchdog ---

    def _on_recovered(self, st: Step) -> Span:
        """A recovery is an instant: its span says what was done and how it ended, an ERROR
        when it failed or was refused (the alert on failing recoveries has its trace)."""
        ev = st.ev
        result = str(ev.attrs.get(names.K_RESULT, ""))
        span = self.tracer.start_span(
            names.SPAN_WATCHDOG_RECOVER,
            context=trace.set_span_in_context(trace.INVALID_SPAN),  # a root, whatever is current
            start_time=_ns(ev),
            attributes={
                names.A_SESSION: ev.session,
                names.A_TURN: ev.turn or "",
                names.A_RECOVERY_RESULT: result,
                names.A_RECOVERY_ACTION: str(ev.attrs.get(names.K_ACTION, "")),
                names.A_GENAI_CONVERSATION: ev.session,
            },
        )
        if ev.tool:
            span.set_attribute(names.A_GENAI_TOOL_NAME, ev.tool)
        if result in _RECOVERY_FAILED:
            _error(span, result, str(ev.attrs.get(names.K_ERROR, "")))
        span.end(_ns(ev))
        return span

    #: What each move does here; a move not listed does nothing.
    _ON_MOVE: ClassVar[Mapping[Move, Callable[[SpanBuilder, Step], Span | None]]] = {
        Move.TURN: _on_turn,
        Move.STOP: _on_stop,
        Move.RPC: _on_rpc,
        Move.JOINED: _on_joined,
        Move.WALK: _on_walk,
        Move.SETTLED: _on_settled,
        Move.RETURNED: _on_returned,
        Move.CLEARED: _on_cleared,
        Move.UI_CLICK: _on_ui_click,
        Move.UI_IDLE: _on_ui_idle,
        Move.STARTED: _on_started,
        Move.ABORT_SENT: _on_abort_sent,
        Move.GRACE_EXPIRED: _on_grace_expired,
        Move.RELEASED: _on_released,
        Move.RECOVERED: _on_recovered,
    }


def _error(span: Span, error_type: str, description: str | None = None) -> None:
    """A failure is an error to a backend: ``error.type`` and status ERROR (OpenTelemetry's
    convention). An ordinary abort is not: its status stays UNSET."""
    span.set_attribute(names.A_ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, description or None))


def _end_all(stop: _Stop, end: int) -> None:
    for span in (*stop.tools.values(), stop.walk, stop.settle, stop.agent_abort, stop.root):
        if span is not None and span.is_recording():
            span.end(end)

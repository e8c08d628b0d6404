"""Every public name turnwatch uses, defined once.

Event kinds, metric names, span names and attribute keys are a contract: users script against
them, dashboards and alerts query them (``design.md`` §3-§5). ``tests/test_names.py`` checks
this module against ``docs/names.md`` and against ``dashboards/``.
"""

from __future__ import annotations

from typing import Final

# --- Event kinds (design §3). The stop path, in order. ---
STOP_CLICKED: Final = "stop.clicked"
ABORT_RPC_RECEIVED: Final = "abort.rpc.received"
ABORT_WALK_STARTED: Final = "abort.walk.started"
TOOLS_ABORT_SENT: Final = "tools.abort.sent"
TOOL_RESULT_DISCARDED: Final = "tool.result.discarded"
TOOL_GRACE_EXPIRED: Final = "tool.grace.expired"
TOOL_FINISHED: Final = "tool.finished"
TURN_SETTLED: Final = "turn.settled"
ABORT_RPC_RETURNED: Final = "abort.rpc.returned"
PROCESSING_CLEARED: Final = "processing.cleared"
# ... and the rest.
RUNTIME_STARTED: Final = "runtime.started"
TURN_STARTED: Final = "turn.started"
TOOL_REQUESTED: Final = "tool.requested"
PERMISSION_REQUESTED: Final = "permission.requested"
PERMISSION_GRANTED: Final = "permission.granted"
PERMISSION_DENIED: Final = "permission.denied"
PERMISSION_CANCELLED: Final = "permission.cancelled"
PERMISSION_LATE: Final = "permission.late"
TOOL_STARTED: Final = "tool.started"
TOOL_PROGRESS: Final = "tool.progress"
TOOL_REFUSED: Final = "tool.refused"
WATCHDOG_FINDING: Final = "watchdog.finding"
WATCHDOG_RECOVERED: Final = "watchdog.recovered"
PROCESS_REAPED: Final = "process.reaped"
#: The ledger lost events of the session (its writer's bounded backlog overflowed while the file
#: could not be written): written once it can write again, where they would have been.
LEDGER_GAP: Final = "ledger.gap"

STOP_PATH_KINDS: Final = (
    STOP_CLICKED,
    ABORT_RPC_RECEIVED,
    ABORT_WALK_STARTED,
    TOOLS_ABORT_SENT,
    TOOL_RESULT_DISCARDED,
    TOOL_GRACE_EXPIRED,
    TOOL_FINISHED,
    TURN_SETTLED,
    ABORT_RPC_RETURNED,
    PROCESSING_CLEARED,
)
OTHER_KINDS: Final = (
    RUNTIME_STARTED,
    TURN_STARTED,
    TOOL_REQUESTED,
    PERMISSION_REQUESTED,
    PERMISSION_GRANTED,
    PERMISSION_DENIED,
    PERMISSION_CANCELLED,
    PERMISSION_LATE,
    TOOL_STARTED,
    TOOL_PROGRESS,
    TOOL_REFUSED,
    WATCHDOG_FINDING,
    WATCHDOG_RECOVERED,
    PROCESS_REAPED,
    LEDGER_GAP,
)
#: The closed set of event kinds: anything else is a bad line.
EVENT_KINDS: Final = frozenset(STOP_PATH_KINDS + OTHER_KINDS)

# --- Event attribute keys (design §3; documented in docs/names.md, "Event attributes") ---
K_SOURCE: Final = "source"
#: ``attrs.source`` of the agent CLIs whose session files turnwatch reads.
AGENT_CLI_SOURCES: Final = frozenset({"codex", "claude-code", "gemini-cli"})
#: ``attrs.source`` of the browser module's ``stop.clicked`` and ``processing.cleared`` (design
#: §6a): their times are the browser's clock, read at the click and when the UI rendered idle.
SOURCE_BROWSER: Final = "browser"
K_MODE: Final = "mode"
K_RECEIPT: Final = "receipt"
K_TRACEPARENT: Final = "traceparent"
K_INFLIGHT: Final = "inflight"
K_OUTCOME: Final = "outcome"
K_SETTLED_BY: Final = "settled_by"
K_PID: Final = "pid"
K_CREATE_TIME: Final = "create_time"
#: Beside ``create_time``: the process's start in the kernel's clock ticks since boot, and the
#: boot's id. A clock step moves wall start times, never these (``runtime.procfs``).
K_START_TICKS: Final = "start_ticks"
K_BOOT_ID: Final = "boot_id"
K_CONTROL: Final = "control"
K_GRACE_S: Final = "grace_s"
K_CLASS: Final = "class"
K_POLICY: Final = "policy"
K_CONTAINMENT: Final = "containment"
K_CGROUP: Final = "cgroup"
#: Beside ``cgroup``: its directory's inode number, which no later cgroup at the same path has
#: in the same boot (the path names the runtime by its pid, and pids are reused).
K_CGROUP_ID: Final = "cgroup_id"
K_HOLES: Final = "holes"
K_TEXT: Final = "text"
K_PROGRESS: Final = "progress"
K_TOTAL: Final = "total"
K_STATUS: Final = "status"
K_ERROR: Final = "error"
K_ERROR_CODE: Final = "error_code"
K_REASON: Final = "reason"
#: ``ledger.gap``: how many events of the session were lost, the first and last one's time.
K_LOST: Final = "lost"
K_FROM_TS: Final = "from_ts"
K_TO_TS: Final = "to_ts"
K_BEFORE_START: Final = "before_start"
K_GRACE_EXPIRED: Final = "grace_expired"
K_AFTER_ABANDON: Final = "after_abandon"
K_LINGERING: Final = "lingering"
K_APPROVED: Final = "approved"
K_PIDS: Final = "pids"
K_SIGNAL: Final = "signal"
K_SURVIVORS: Final = "survivors"
K_FINDING: Final = "finding"
K_DETAIL: Final = "detail"
K_RESULT: Final = "result"
K_ACTION: Final = "action"
K_REFUSED_PIDS: Final = "refused_pids"
#: The tool call ids of a LangGraph thread the watchdog answered in its checkpoint.
K_ANSWERED: Final = "answered"
K_STEP: Final = "step"
K_KILL_AT: Final = "kill_at"
K_VERSION: Final = "version"
K_LOG: Final = "log"
K_DURATION_MS: Final = "duration_ms"
K_BACKGROUND: Final = "background"
K_ARGS: Final = "args"
K_PROJECT: Final = "project"
K_PARENT_SESSION: Final = "parent_session"
#: A permission event an agent-CLI reader inferred (the CLI writes no prompt to its log): why,
#: as the rule's name. A recorded prompt never carries it.
K_INFERRED: Final = "inferred"
#: Every key an event's ``attrs`` may carry: a producer emitting another is a defect.
EVENT_ATTRIBUTES: Final = frozenset(
    {
        K_SOURCE,
        K_MODE,
        K_RECEIPT,
        K_TRACEPARENT,
        K_INFLIGHT,
        K_OUTCOME,
        K_SETTLED_BY,
        K_PID,
        K_CREATE_TIME,
        K_START_TICKS,
        K_BOOT_ID,
        K_CONTROL,
        K_GRACE_S,
        K_CLASS,
        K_POLICY,
        K_CONTAINMENT,
        K_CGROUP,
        K_CGROUP_ID,
        K_HOLES,
        K_TEXT,
        K_PROGRESS,
        K_TOTAL,
        K_STATUS,
        K_ERROR,
        K_ERROR_CODE,
        K_REASON,
        K_LOST,
        K_FROM_TS,
        K_TO_TS,
        K_BEFORE_START,
        K_GRACE_EXPIRED,
        K_AFTER_ABANDON,
        K_LINGERING,
        K_APPROVED,
        K_PIDS,
        K_SIGNAL,
        K_SURVIVORS,
        K_FINDING,
        K_DETAIL,
        K_RESULT,
        K_ACTION,
        K_REFUSED_PIDS,
        K_ANSWERED,
        K_STEP,
        K_KILL_AT,
        K_VERSION,
        K_LOG,
        K_DURATION_MS,
        K_BACKGROUND,
        K_ARGS,
        K_PROJECT,
        K_PARENT_SESSION,
        K_INFERRED,
    }
)

# --- Error codes ---
TOOL_ABORTED: Final = "TOOL_ABORTED"

# --- Metrics (design §4; base units, ``turnwatch_`` prefix) ---
M_STOP_TO_SETTLE: Final = "turnwatch_stop_to_settle_seconds"
M_STOP_TO_IDLE: Final = "turnwatch_stop_to_idle_seconds"
M_TOOL_ABORT: Final = "turnwatch_tool_abort_seconds"
M_STOPS: Final = "turnwatch_stops"  # prometheus_client appends _total
M_RESULTS_DISCARDED: Final = "turnwatch_tool_results_discarded"
M_GRACE_EXPIRED: Final = "turnwatch_grace_expired"
M_PERMISSIONS_CANCELLED: Final = "turnwatch_permissions_cancelled"
M_INFLIGHT: Final = "turnwatch_inflight_tool_calls"
M_PINNED: Final = "turnwatch_pinned_sessions"
M_ABORTED_LIVE: Final = "turnwatch_aborted_turns_with_live_processes"
M_FINDINGS: Final = "turnwatch_watchdog_findings"
M_RECOVERIES: Final = "turnwatch_watchdog_recoveries"
M_SCAN: Final = "turnwatch_watchdog_scan_seconds"
M_EVENTS_LOST: Final = "turnwatch_ledger_events_lost"

#: Exposed sample family names (counters with ``_total``), as dashboards query them.
METRIC_FAMILIES: Final = (
    M_STOP_TO_SETTLE,
    M_STOP_TO_IDLE,
    M_TOOL_ABORT,
    M_STOPS + "_total",
    M_RESULTS_DISCARDED + "_total",
    M_GRACE_EXPIRED + "_total",
    M_PERMISSIONS_CANCELLED + "_total",
    M_INFLIGHT,
    M_PINNED,
    M_ABORTED_LIVE,
    M_FINDINGS + "_total",
    M_RECOVERIES + "_total",
    M_SCAN,
)

# --- Spans (design §5) ---
SPAN_STOP: Final = "stop"
#: The stop RPC, and the span that times it.
RPC_AGENT_ABORT: Final = "agent.abort"
SPAN_AGENT_ABORT: Final = RPC_AGENT_ABORT
SPAN_ABORT_WALK: Final = "abort.walk"
SPAN_TOOLS_ABORT: Final = "tools.abort"
SPAN_TURN_SETTLE: Final = "turn.settle"
SPAN_EXECUTE_TOOL_PREFIX: Final = "execute_tool"
#: One per recovery the watchdog recorded; ERROR when it failed or was refused.
SPAN_WATCHDOG_RECOVER: Final = "watchdog.recover"
#: The OpenAI Agents SDK's function span (``FunctionSpanData``), converted:
#: ``openai_agents.function {name}``.
SPAN_SDK_FUNCTION_PREFIX: Final = "openai_agents.function"

# --- Span and event attributes ---
A_SESSION: Final = "turnwatch.session"
A_TURN: Final = "turnwatch.turn"
A_MODE: Final = "turnwatch.mode"
A_SOURCE: Final = "turnwatch.stop.source"
A_TOOL_CLASS: Final = "turnwatch.tool.class"
A_POLICY: Final = "turnwatch.tool.policy"
A_OUTCOME: Final = "turnwatch.outcome"
A_ERROR_TYPE: Final = "error.type"
A_STOP_CLICKED: Final = "turnwatch.stop.clicked"
A_RECEIPT: Final = "turnwatch.receipt"
A_WALK_INFLIGHT: Final = "turnwatch.walk.inflight"
A_PROCESS_PID: Final = "process.pid"
A_BEFORE_START: Final = "turnwatch.tool.before_start"
A_RECOVERY_RESULT: Final = "turnwatch.recovery.result"
A_RECOVERY_ACTION: Final = "turnwatch.recovery.action"
#: The OpenAI Agents SDK's ids of a converted span (``span_…``, its parent's).
A_SDK_SPAN_ID: Final = "openai_agents.span_id"
A_SDK_PARENT_ID: Final = "openai_agents.parent_id"
# GenAI semantic conventions (opentelemetry-semantic-conventions, gen_ai_attributes).
A_GENAI_OPERATION: Final = "gen_ai.operation.name"
A_GENAI_TOOL_NAME: Final = "gen_ai.tool.name"
A_GENAI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
A_GENAI_TOOL_TYPE: Final = "gen_ai.tool.type"
A_GENAI_CONVERSATION: Final = "gen_ai.conversation.id"
GENAI_OPERATION_EXECUTE_TOOL: Final = "execute_tool"

# --- Watchdog finding kinds (design §6 and the watchdog issue) ---
F_ABORTED_WITH_LIVE_PROCESS: Final = "aborted_with_live_process"
F_PINNED_SESSION: Final = "pinned_session"
F_ABORT_RPC_STUCK: Final = "abort_rpc_stuck"
F_ORPHAN_TOOL_PROCESS: Final = "orphan_tool_process"
F_AWAIT_OVERDUE: Final = "await_overdue"
F_ACTIVITY_AFTER_SETTLE: Final = "activity_after_settle"
F_PERMISSION_AFTER_STOP: Final = "permission_after_stop"
F_BACKGROUND_PROCESS: Final = "background_process"
#: A LangGraph thread whose checkpoint a stopped or dead run left with unanswered tool calls.
F_DANGLING_TOOL_CALLS: Final = "dangling_tool_calls"
FINDING_KINDS: Final = (
    F_ABORTED_WITH_LIVE_PROCESS,
    F_PINNED_SESSION,
    F_ABORT_RPC_STUCK,
    F_ORPHAN_TOOL_PROCESS,
    F_AWAIT_OVERDUE,
    F_ACTIVITY_AFTER_SETTLE,
    F_PERMISSION_AFTER_STOP,
    F_BACKGROUND_PROCESS,
    F_DANGLING_TOOL_CALLS,
)

# --- Session states (design §7) ---
STATE_IDLE: Final = "idle"
STATE_PROCESSING: Final = "processing"
STATE_STOPPING: Final = "stopping"
STATE_PINNED: Final = "pinned"
#: The ledger lost events of the session since its last known turn began: its state is not known.
STATE_UNKNOWN: Final = "unknown"
SESSION_STATES: Final = (
    STATE_IDLE,
    STATE_PROCESSING,
    STATE_STOPPING,
    STATE_PINNED,
    STATE_UNKNOWN,
)

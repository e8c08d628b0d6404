"""The schema's validator as ``ingest`` runs it: its short way (a line of the common shapes checked
by hand, the per-kind rules looked up by the line's kind) gives the verdicts the plain compiled
schema gives, on generated lines (hypothesis) and on the shipped schema's own.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

import fastjsonschema
from hypothesis import example, given, settings
from hypothesis import strategies as st

from turnwatch import names
from turnwatch.tracing.ingest import schema, validator

_KINDS = [*names.EVENT_KINDS, "tool.teleported"]
_IDS = st.one_of(st.none(), st.sampled_from(["", "t", "c", "x" * 300]), st.integers())
_ATTRS = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "outcome": st.sampled_from(["completed", "aborted", "failed", "exploded", 3]),
            "pid": st.sampled_from([0, 1, 4242, "9"]),
            "create_time": st.sampled_from([0.0, 12.5, -1, "now"]),
            "class": st.sampled_from(["read_only", "extension", "teleport"]),
        },
    ),
)


#: Values at the edges of what the schema allows, for every key (JSON's own types only).
_EDGES: list[object] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2,
    1.5,
    -0.5,
    10**20,
    "",
    "a",
    "x" * 256,
    "x" * 257,
    "0" * 32,
    "0" * 31 + "\n",
    "a" * 16,
    [],
    ["a"],
    [1],
    [[1, 0.5]],
    [[0, 1]],
    {},
    {"a": 1},
    "read_only",
    "process",
    "cgroup",
    "process_group",
    "completed",
    "exploded",
    "codex",
]


_ANY = st.sampled_from(_EDGES)
_WIDE_ATTRS = st.dictionaries(
    st.sampled_from(
        [
            "pid",
            "create_time",
            "start_ticks",
            "boot_id",
            "class",
            "outcome",
            "mode",
            "control",
            "containment",
            "holes",
            "cgroup",
            "cgroup_id",
            "lingering",
            "source",
            "other",
        ]
    ),
    _ANY,
    max_size=3,
)


_FIELD_VALUES = st.one_of(_ANY, st.integers(-(10**20), 10**20), st.floats(-2e9, 2e9))
_FIELDS = st.dictionaries(
    st.sampled_from(
        ["ts", "kind", "session", "turn", "call", "tool", "mono_ns", "trace_id", "span_id", "x"]
    ),
    _FIELD_VALUES,
    max_size=2,
)


@settings(max_examples=2000, deadline=None)
# Each condition of the hand check, at its edge, in every run (found by mutating _fits).
@example(kind="tool.started", fields={"session": ""}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"turn": "x" * 257}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"ts": -1}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"ts": 100_000_000_001}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"mono_ns": True}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"mono_ns": 2**63}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"mono_ns": -(2**63) - 1}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"mono_ns": 2**63 - 1}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"trace_id": "0" * 31 + "\n"}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"x": 1}, drop=set(), attrs=None)
@example(kind="tool.started", fields={}, drop=set(), attrs={"pid": 0})
@example(kind="tool.started", fields={}, drop=set(), attrs={"pid": 2**31})
@example(kind="tool.started", fields={}, drop=set(), attrs={"pid": 2**31 - 1})
@example(kind="tool.started", fields={}, drop=set(), attrs={"create_time": -0.5})
@example(kind="tool.started", fields={}, drop=set(), attrs={"cgroup": ""})
@example(kind="tool.started", fields={}, drop=set(), attrs={"class": "teleport"})
@example(kind="tool.started", fields={}, drop=set(), attrs={"mode": 1})
@example(kind="tool.started", fields={}, drop=set(), attrs={"lingering": [[0, 1]]})
@example(kind="tool.started", fields={}, drop=set(), attrs={"start_ticks": -1})
@example(kind="tool.started", fields={}, drop=set(), attrs={"start_ticks": 2**63})
@example(kind="tool.started", fields={}, drop=set(), attrs={"start_ticks": 2**63 - 1})
@example(kind="tool.started", fields={}, drop=set(), attrs={"start_ticks": 1.0})
@example(kind="tool.started", fields={}, drop=set(), attrs={"boot_id": ""})
@example(kind="tool.started", fields={}, drop=set(), attrs={"cgroup_id": -1})
@example(kind="tool.started", fields={}, drop=set(), attrs={"cgroup_id": 2**63})
@example(kind="tool.started", fields={}, drop=set(), attrs={"cgroup_id": 1.0})
@example(kind="tool.started", fields={}, drop=set(), attrs={"boot_id": "b" * 65})
@example(kind="tool.started", fields={}, drop=set(), attrs={"boot_id": "b" * 64})
@example(kind="tool.started", fields={}, drop=set(), attrs={"lingering": [[1, 1.5, 7]]})
@example(kind="tool.started", fields={}, drop=set(), attrs={"lingering": [[1, 1.5, -7]]})
@example(kind="tool.started", fields={}, drop={"call"}, attrs=None)
@given(
    kind=st.sampled_from(sorted(names.EVENT_KINDS)),
    fields=_FIELDS,
    drop=st.sets(st.sampled_from(["session", "turn", "call", "tool", "attrs"]), max_size=1),
    attrs=st.one_of(st.none(), _WIDE_ATTRS, _ANY),
)
def test_the_short_way_never_accepts_what_the_schema_refuses(
    kind: str, fields: dict[str, object], drop: set[str], attrs: object
) -> None:
    """The hand check of the common shapes (``_fits``, with the per-kind ``required`` as a set
    test) gives the plain schema's verdict, and its words: on a good line of each kind with
    one or two of its fields changed, one dropped, or its attrs changed or replaced."""
    obj: dict[str, object] = {
        "ts": 1.5e9,
        "kind": kind,
        "session": "s",
        "turn": "t",
        "call": "c",
        "tool": "Grep",
        "attrs": {"outcome": "completed", "pid": 4, "create_time": 1.0},
    }
    obj.update(fields)
    for key in drop:
        obj.pop(key, None)
    if isinstance(attrs, dict) and isinstance(obj.get("attrs"), dict):
        obj["attrs"] = {**obj["attrs"], **attrs}  # type: ignore[dict-item]
    elif attrs is not None:
        obj["attrs"] = attrs
    plain, fast = _verdicts(obj)
    assert plain == fast, obj


def test_the_short_way_is_taken_for_the_shipped_schema() -> None:
    """``_fits`` was written for this schema: a change to it must be read into ``_fits`` (and
    its digest updated), or lines would take the long way unseen."""
    module = importlib.import_module(
        "turnwatch.tracing.ingest"
    )  # the package's `ingest`: a function
    base = {k: v for k, v in schema().items() if k != "allOf"}
    assert module._digest(base) == module._FITS_SCHEMA  # noqa: SLF001 - the guard itself
    shape = module._Shape.of(base)  # noqa: SLF001
    line = {
        "ts": 1.0,
        "kind": "tool.started",
        "session": "s",
        "turn": "t",
        "call": "c",
        "tool": "Grep",
        "attrs": {"pid": 7, "create_time": 2.5, "class": "process"},
    }
    assert module._fits(line, shape)  # noqa: SLF001


def _verdicts(obj: object) -> tuple[str, str]:
    """The plain schema's verdict on ``obj`` and the shipped validator's: "ok" or the words."""
    verdicts = []
    for validate in (_plain(), validator()):
        try:
            validate(obj)
            verdicts.append("ok")
        except fastjsonschema.JsonSchemaValueException as exc:
            verdicts.append(exc.message)
    return verdicts[0], verdicts[1]


@functools.cache
def _plain() -> Callable[[object], object]:
    """The whole schema compiled as it is, with its if/then rules tried one by one."""
    return fastjsonschema.compile(schema())


@settings(max_examples=400, deadline=None)
@given(
    kind=st.sampled_from(_KINDS),
    ts=st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=3)),
    turn=_IDS,
    call=_IDS,
    tool=_IDS,
    attrs=_ATTRS,
)
def test_kind_dispatch_gives_the_plain_schema_verdicts(
    kind: str, ts: object, turn: object, call: object, tool: object, attrs: object
) -> None:
    """The fast validator (per-kind rules looked up) judges every line as the schema does."""
    obj: dict[str, object] = {"ts": ts, "kind": kind, "session": "s"}
    for key, value in (("turn", turn), ("call", call), ("tool", tool), ("attrs", attrs)):
        if value is not None:
            obj[key] = value
    plain, fast = _verdicts(obj)
    assert plain == fast, obj

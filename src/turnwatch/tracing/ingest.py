"""JSON-line events of a foreign runtime, validated against the shipped JSON Schema.

A bad line is reported with its number and reason and skipped; every good line is kept.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import IO, Any, cast

import fastjsonschema

from turnwatch import names
from turnwatch.runtime.events import NO_ATTRS, Event, EventSink, new_event
from turnwatch.runtime.lines import CHUNK, LineReader, Oversized
from turnwatch.tracing import codec

#: A longer line is refused without being parsed (a runaway writer, a binary file).
MAX_LINE_BYTES = 1024 * 1024
#: The latest ``ts`` a line may have (the schema's bound, the year 5138). A runtime that writes
#: milliseconds writes ~1.7e12: taken as seconds, its sessions would sit 50,000 years ahead,
#: always "0 s ago", and never be found pinned.
TS_MAX = 100_000_000_000
#: ``mono_ns``'s bounds (the schema's: a 64-bit integer, as the ledger keeps it).
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: ``attrs.pid``'s bound (the schema's: a ``pid_t`` is 32 bits).
PID_MAX = (1 << 31) - 1
MAX_REPORTED = 1000


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema of one event line, as shipped in the package."""
    text = resources.files("turnwatch.tracing").joinpath("event.schema.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def validator() -> Callable[[Any], Any]:
    """The schema compiled to Python (fastjsonschema): a generic validator is 20x slower.

    The schema's per-kind rules (``allOf`` of ``if kind … then …``) are looked up by the line's
    kind instead of tried one by one: compiled, each ``if`` that does not match raises and
    catches an exception, which made up most of the cost of a good line. A line that fails is
    judged again by the whole schema, so a bad line gets the message it always got.
    """
    full = schema()
    plain = fastjsonschema.compile(full)
    rules = _kind_rules(full)
    if rules is None:  # a rule of another shape: validate the plain way
        return plain
    base_schema = {k: v for k, v in full.items() if k != "allOf"}
    base = fastjsonschema.compile(base_schema)
    shape = _Shape.of(base_schema) if _digest(base_schema) == _FITS_SCHEMA else None
    needs, rest = _required_rules(full)
    none: frozenset[str] = frozenset()

    def validate(obj: Any) -> Any:
        try:
            if shape is not None and _fits(obj, shape):
                kind = obj["kind"]
                if needs.get(kind, none).issubset(obj):  # else the long way, which words it
                    for check in rest.get(kind, ()):
                        check(obj)
                    return obj
            base(obj)
            for check in rules.get(obj["kind"], ()):
                check(obj)
        except fastjsonschema.JsonSchemaValueException:
            return plain(obj)  # raises, with the whole schema's first complaint
        return obj

    return validate


def _digest(value: Any) -> str:
    return hashlib.blake2b(json.dumps(value, sort_keys=True).encode(), digest_size=16).hexdigest()


#: The digest of the schema (without its per-kind rules) that :func:`_fits` was written for: a
#: schema changed since is validated by the compiled code alone until ``_fits`` follows it.
_FITS_SCHEMA = "a4684e4b7f2c2f271e056001281ae6c1"
_IDS = ("session", "turn", "call", "tool")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_HEX16 = re.compile(r"[0-9a-f]{16}")
#: attrs keys the schema constrains and _fits does not check: such a line goes the long way.
_ATTRS_LONG = frozenset({names.K_HOLES, names.K_LINGERING})
_ATTRS_STR = (names.K_OUTCOME, names.K_MODE, names.K_CONTROL)


@dataclass(frozen=True)
class _Shape:
    """What :func:`_fits` reads of the schema: its top-level keys and its enums."""

    keys: frozenset[str]
    kinds: frozenset[str]
    classes: frozenset[str]
    containments: frozenset[str]

    @classmethod
    def of(cls, base: dict[str, Any]) -> _Shape:
        props, attrs = base["properties"], base["properties"]["attrs"]["properties"]
        return cls(
            frozenset(props),
            frozenset(props["kind"]["enum"]),
            frozenset(attrs[names.K_CLASS]["enum"]),
            frozenset(attrs[names.K_CONTAINMENT]["enum"]),
        )


def _fits(obj: Any, shape: _Shape) -> bool:
    """True only for a line the schema's base (all but its per-kind rules) accepts: the common
    shapes, checked by hand (cheaper than the compiled code, which walks every property
    through generic checks). False says nothing: the compiled code judges the line, and words
    its complaint. Types by ``type() is``: a bool is no number here, as in JSON."""
    if type(obj) is not dict or not shape.keys.issuperset(obj):
        return False
    ts = obj.get("ts")
    if (type(ts) is not float and type(ts) is not int) or not 0 <= ts <= TS_MAX:
        return False
    kind = obj.get("kind")
    if type(kind) is not str or kind not in shape.kinds or "session" not in obj:
        return False
    for key in _IDS:
        if key in obj:
            v = obj[key]
            if type(v) is not str or not 0 < len(v) <= 256:
                return False
    if "mono_ns" in obj:
        mono = obj["mono_ns"]
        if type(mono) is not int or not INT64_MIN <= mono <= INT64_MAX:
            return False
    for key, hex_ in (("trace_id", _HEX32), ("span_id", _HEX16)):
        if key in obj and (type(obj[key]) is not str or hex_.fullmatch(obj[key]) is None):
            return False
    return "attrs" not in obj or _attrs_fit(obj["attrs"], shape)


def _attrs_fit(a: Any, shape: _Shape) -> bool:
    if type(a) is not dict or not _ATTRS_LONG.isdisjoint(a):
        return False
    pid = a.get(names.K_PID, 1)
    if type(pid) is not int or not 1 <= pid <= PID_MAX:
        return False
    ct = a.get(names.K_CREATE_TIME, 0)
    if (type(ct) is not float and type(ct) is not int) or ct < 0:
        return False
    for key in (names.K_START_TICKS, names.K_CGROUP_ID):
        count = a.get(key, 0)
        if type(count) is not int or not 0 <= count <= INT64_MAX:
            return False
    boot = a.get(names.K_BOOT_ID, "-")
    if type(boot) is not str or not 0 < len(boot) <= 64:
        return False
    for key, allowed in ((names.K_CLASS, shape.classes), (names.K_CONTAINMENT, shape.containments)):
        if key in a and (type(a[key]) is not str or a[key] not in allowed):
            return False
    cgroup = a.get(names.K_CGROUP, "-")
    if type(cgroup) is not str or not cgroup:
        return False
    return all(key not in a or type(a[key]) is str for key in _ATTRS_STR)


def _kind_rules(full: dict[str, Any]) -> dict[str, list[Callable[[Any], Any]]] | None:
    """kind → the compiled ``then`` of every ``allOf`` rule whose ``if`` matches that kind."""
    rules: dict[str, list[Callable[[Any], Any]]] = {}
    for rule in full.get("allOf", []):
        cond = rule.get("if")
        if (
            set(rule) != {"if", "then"}
            or not isinstance(cond, dict)
            or set(cond) != {"properties"}
            or set(cond["properties"]) != {"kind"}
        ):
            return None
        kind = cond["properties"]["kind"]
        if set(kind) == {"enum"}:
            kinds = list(kind["enum"])
        elif set(kind) == {"const"}:
            kinds = [kind["const"]]
        else:
            return None
        then = fastjsonschema.compile(rule["then"])
        for k in kinds:
            rules.setdefault(k, []).append(then)
    return rules


def _required_rules(
    full: dict[str, Any],
) -> tuple[dict[str, frozenset[str]], dict[str, list[Callable[[Any], Any]]]]:
    """The per-kind rules split for the short way: kind → the keys its ``required``-only rules
    need (a set test), and kind → the others, compiled."""
    needs: dict[str, frozenset[str]] = {}
    rest: dict[str, list[Callable[[Any], Any]]] = {}
    for rule in full.get("allOf", []):
        kind = rule["if"]["properties"]["kind"]
        kinds = kind["enum"] if "enum" in kind else [kind["const"]]
        then = rule["then"]
        pure = set(then) == {"required"}
        check = None if pure else fastjsonschema.compile(then)
        for k in kinds:
            if check is None:
                needs[k] = needs.get(k, frozenset()) | frozenset(then["required"])
            else:
                rest.setdefault(k, []).append(check)
    return needs, rest


@dataclass
class BadLine:
    """A rejected line: where, and why."""

    lineno: int
    reason: str


@dataclass
class IngestReport:
    """What one ingest did."""

    good: int = 0
    bad: list[BadLine] = field(default_factory=list)
    bad_count: int = 0

    def reject(self, lineno: int, reason: str) -> None:
        self.bad_count += 1
        if len(self.bad) < MAX_REPORTED:
            self.bad.append(BadLine(lineno, reason))


def parse_line(raw: bytes | Oversized, lineno: int) -> Event | BadLine | None:
    """One line → an event, a :class:`BadLine`, or None for a blank line."""
    size = raw.size if isinstance(raw, Oversized) else len(raw)
    if size > MAX_LINE_BYTES or isinstance(raw, Oversized):
        return BadLine(lineno, f"line is {size} bytes, over the {MAX_LINE_BYTES} limit")
    text = raw.strip()
    if not text:
        return None
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as exc:
        return BadLine(lineno, f"not UTF-8: byte {exc.start + 1} is {text[exc.start]:#04x}")
    try:
        obj: Any = codec.loads(text)
    except ValueError as exc:  # orjson's JSONDecodeError
        return BadLine(lineno, f"not JSON: {exc}")
    kind = obj.get("kind") if isinstance(obj, dict) else None
    if isinstance(kind, str) and kind not in names.EVENT_KINDS:
        near = difflib.get_close_matches(kind, sorted(names.EVENT_KINDS), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else " (see docs/names.md)"
        return BadLine(lineno, f"unknown event kind {kind!r}{hint}")
    try:
        validator()(obj)
    except fastjsonschema.JsonSchemaValueException as exc:
        ts = obj.get("ts") if isinstance(obj, dict) else None
        if exc.message.startswith("data.ts ") and isinstance(ts, int | float) and ts > TS_MAX:
            return BadLine(
                lineno, f"ts {ts!r} is not unix seconds: after the year 5138 (milliseconds?)"
            )
        return BadLine(lineno, exc.message)
    get = obj.get
    # Positional, by tuple.__new__: a named tuple's keyword __new__ cost more than the parse.
    return new_event(
        Event,
        (
            obj["kind"],
            obj["session"],
            float(obj["ts"]),
            get("mono_ns"),
            get("turn"),
            get("call"),
            get("tool"),
            get("attrs") or NO_ATTRS,
            get("trace_id"),
            get("span_id"),
        ),
    )


def lines_of(stream: IO[bytes]) -> Iterator[tuple[int, bytes | Oversized]]:
    """A stream's lines, numbered from 1, to its end (follow a file with :class:`Tail`); one
    over :data:`MAX_LINE_BYTES` is skipped unheld, said by its size."""
    lines = LineReader(cap=MAX_LINE_BYTES)
    # read1: what a pipe has now (a producer writing a line at a time is read as it writes).
    read = getattr(stream, "read1", stream.read)
    while chunk := read(CHUNK):
        yield from lines.push(chunk)
    yield from lines.end()


def ingest(
    source: IO[bytes] | Iterable[tuple[int, bytes | Oversized]],
    sink: EventSink,
    *,
    on_bad: Callable[[BadLine], None] | None = None,
) -> IngestReport:
    """Feed every good line of ``source`` to ``sink``; report the bad ones.

    ``source`` is a binary stream read to its end, or numbered lines (a
    :class:`~turnwatch.tracing.tail.Tail` following a file).
    """
    report = IngestReport()
    numbered = lines_of(cast(IO[bytes], source)) if hasattr(source, "readline") else source
    for lineno, raw in numbered:
        parsed = parse_line(raw, lineno)
        if parsed is None:
            continue
        if isinstance(parsed, BadLine):
            report.reject(parsed.lineno, parsed.reason)
            if on_bad is not None:
                on_bad(parsed)
            continue
        sink(parsed)
        report.good += 1
    return report

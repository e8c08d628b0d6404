"""names.py is the one definition; the docs users read and the schema must agree with it."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from turnwatch import names
from turnwatch.tracing.ingest import schema

ROOT = Path(__file__).resolve().parents[1]


def doc_table(section: str) -> list[str]:
    """The first column of the table under ``## section`` in docs/names.md."""
    text = (ROOT / "docs" / "names.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", body, flags=re.M)


def test_event_kinds_match_the_docs_and_the_schema() -> None:
    assert doc_table("Event kinds") == list(names.STOP_PATH_KINDS + names.OTHER_KINDS)
    schema_kinds = schema()["properties"]["kind"]["enum"]
    assert set(schema_kinds) == names.EVENT_KINDS


def test_metrics_match_the_docs() -> None:
    assert doc_table("Metrics") == list(names.METRIC_FAMILIES)


def test_spans_and_findings_match_the_docs() -> None:
    spans = doc_table("Spans")
    assert spans[:5] == [
        names.SPAN_STOP,
        names.SPAN_AGENT_ABORT,
        names.SPAN_ABORT_WALK,
        names.SPAN_TOOLS_ABORT,
        names.SPAN_TURN_SETTLE,
    ]
    assert doc_table("Watchdog findings") == list(names.FINDING_KINDS)
    assert doc_table("Session states") == list(names.SESSION_STATES)


def test_every_attribute_constant_is_documented() -> None:
    documented = set(doc_table("Attributes"))
    consts = {v for k, v in vars(names).items() if k.startswith("A_")}
    assert consts == documented


def test_metric_names_in_dashboards_exist() -> None:
    known = set(names.METRIC_FAMILIES) | {names.M_EVENTS_LOST + "_total"}
    files = [p for p in (ROOT / "dashboards").rglob("*") if p.suffix in {".json", ".yml"}]
    assert len(files) >= 4, "the dashboards and rule files exist"
    used: set[str] = set()
    for path in files:
        used |= set(re.findall(r"turnwatch_[a-z_]+", path.read_text()))
    used = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}
    assert used - known == set(), "dashboards query metrics that turnwatch does not expose"
    assert known - {names.M_EVENTS_LOST + "_total"} <= used, "every metric is on a dashboard"


def test_json_schema_is_valid_json() -> None:
    path = ROOT / "src" / "turnwatch" / "tracing" / "event.schema.json"
    assert json.loads(path.read_text())["required"] == ["ts", "kind", "session"]


# --- names.py is the one spelling: no copy of a name in src, no undeclared event attribute ---

SRC = ROOT / "src" / "turnwatch"


def _names() -> dict[str, str]:
    """Each public value in names.py → its constant."""
    out: dict[str, str] = {}
    for k, v in vars(names).items():
        if k.isupper() and isinstance(v, str):
            out.setdefault(v, k)
    return out


def _exempt(tree: ast.AST) -> set[int]:
    """ids of literals that are not uses: docstrings, f-string text, enum member values."""
    out: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            out.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.JoinedStr):
            out.update(id(v) for v in node.values)
        if isinstance(node, ast.ClassDef) and any(
            isinstance(b, ast.Name) and b.id.endswith("Enum") for b in node.bases
        ):
            for stmt in node.body:
                if isinstance(stmt, ast.Assign):
                    out.add(id(stmt.value))
    return out


def _plain_words() -> set[str]:
    """Values that are also ordinary words (an attribute key "pid", a state "idle"): copies of
    these are flagged only where they name an event attribute, not as a JSON key or a column."""
    return set(names.EVENT_ATTRIBUTES) | set(names.SESSION_STATES) | {names.SPAN_STOP}


def _event_keys(tree: ast.AST) -> set[int]:
    """ids of literals used as event attribute keys: ``x.attrs.get(k)``, ``x.attrs[k]``,
    ``k in x.attrs``, and the keys of an ``attrs`` dict being built."""

    def is_attrs(e: ast.AST) -> bool:
        return (isinstance(e, ast.Attribute) and e.attr == "attrs") or (
            isinstance(e, ast.Name) and e.id == "attrs"
        )

    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "get" and is_attrs(node.func.value) and node.args:
                out.add(id(node.args[0]))
            for kw in node.keywords:
                if kw.arg == "attrs" and isinstance(kw.value, ast.Dict):
                    out.update(id(k) for k in kw.value.keys if k is not None)
        if isinstance(node, ast.Subscript) and is_attrs(node.value):
            out.add(id(node.slice))
        if isinstance(node, ast.Compare) and any(is_attrs(c) for c in node.comparators):
            out.add(id(node.left))
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict)
            and any(is_attrs(t) for t in node.targets)
        ):
            out.update(id(k) for k in node.value.keys if k is not None)
    return out


def copies_of_names() -> list[str]:
    """``file:line "value"`` for every string literal in src that spells a names.py value."""
    values, plain = _names(), _plain_words()
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "names.py":
            continue
        tree = ast.parse(path.read_text())
        skip, keys = _exempt(tree), _event_keys(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if node.value not in values or id(node) in skip:
                continue
            if node.value in plain and id(node) not in keys:
                continue
            rel = path.relative_to(SRC)
            found.append(f"{rel}:{node.lineno} {node.value!r} (names.{values[node.value]})")
    return found


def test_no_string_in_src_spells_a_name_itself() -> None:
    assert copies_of_names() == []


def emitted_attribute_keys() -> dict[str, list[str]]:
    """Every key src puts into (or reads from) an event's attrs, with where."""
    keys: dict[str, list[str]] = {}

    def add(key: str, path: Path, line: int) -> None:
        keys.setdefault(key, []).append(f"{path.relative_to(SRC)}:{line}")

    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("emit", "record", "finish"):
                for kw in node.keywords:
                    if kw.arg and kw.arg not in _NOT_ATTRS.get(name, ()):
                        add(kw.arg, path, node.lineno)
    return keys


#: Keyword parameters of the emitters that are not attributes.
_NOT_ATTRS = {
    "emit": ("turn", "call", "tool", "attrs"),
    "record": (),
    "finish": ("output", "error_code", "data", "phase"),
}


def test_every_emitted_attribute_is_declared_and_documented() -> None:
    undeclared = {
        k: v for k, v in emitted_attribute_keys().items() if k not in names.EVENT_ATTRIBUTES
    }
    assert undeclared == {}
    consts = {v for k, v in vars(names).items() if k.startswith("K_")}
    assert consts == names.EVENT_ATTRIBUTES
    assert set(doc_table("Event attributes")) == consts

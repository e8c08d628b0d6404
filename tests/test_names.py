"""names.py is the one definition; the docs users read and the schema must agree with it."""

from __future__ import annotations

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

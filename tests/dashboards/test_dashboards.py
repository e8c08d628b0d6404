"""Dashboards and rules: generated files current, promtool clean, and every expression answered
by a real Prometheus scraping two turnwatch hosts.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from dashboards import generate, spec
from tests.conftest import Procs, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "dashboards" / "prometheus"


def need(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        if os.environ.get("TURNWATCH_REQUIRE_PROMETHEUS"):
            pytest.fail(f"{binary} is required here (TURNWATCH_REQUIRE_PROMETHEUS is set)")
        pytest.skip(f"{binary} not found: install it with `apt-get install prometheus`")
    return path


def test_generated_files_are_current() -> None:
    assert generate.main(["--check"]) == 0, "run: python -m dashboards.generate"


def test_dashboards_are_importable() -> None:
    for d in spec.DASHBOARDS:
        data = json.loads((ROOT / "dashboards" / "grafana" / f"{d.uid}.json").read_text())
        assert data["schemaVersion"] >= 39
        assert [i["name"] for i in data["__inputs"]] == ["DS_PROMETHEUS"]
        for panel in data["panels"]:
            for target in panel["targets"]:
                assert target["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    stops = json.loads((ROOT / "dashboards/grafana/turnwatch-stops.json").read_text())
    assert any(t.get("exemplar") for p in stops["panels"] for t in p["targets"])
    assert any(p["type"] == "heatmap" for p in stops["panels"])


def test_rules_pass_promtool_lint_and_unit_tests() -> None:
    promtool = need("promtool")
    check = subprocess.run(
        [
            promtool,
            "check",
            "rules",
            "--lint=all",
            "--lint-fatal",
            str(RULES / "rules.yml"),
            str(RULES / "alerts.yml"),
        ],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    unit = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yml"], cwd=RULES, capture_output=True, text=True
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr
    tested = {c.alert for c in __import__("dashboards.alert_tests").alert_tests.CASES}
    assert tested == {a.name for a in spec.ALERTS}, "every alert has a firing/not-firing case"


def test_every_alert_has_a_runbook() -> None:
    for a in spec.ALERTS:
        page = ROOT / "docs" / "runbooks" / f"{a.name}.md"
        assert page.exists(), page
        assert a.runbook.endswith(f"docs/runbooks/{a.name}.md")


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.fixture
def fleet(tmp_path: Path, procs: Procs) -> tuple[list[str], int]:
    """Two turnwatch hosts (3 and 2 stops); the second runs a watchdog over its ledger."""
    hosts = [
        (tmp_path / "a.port", 3, []),
        (tmp_path / "b.port", 2, ["--ledger", str(tmp_path / "b.sqlite3")]),
    ]
    for port_file, n, extra in hosts:
        procs.spawn(
            [sys.executable, "-m", "tests.dashboards.fleet_host", str(port_file), str(n), *extra],
            cwd=ROOT,
        )
    for port_file, _n, _e in hosts:
        wait_until(
            Path(f"{port_file}.done").exists,
            timeout=60,
            what=f"{port_file.name} to run its stops",
        )
    return [f"127.0.0.1:{p.read_text()}" for p, _n, _e in hosts], sum(n for _p, n, _e in hosts)


@pytest.mark.slow
def test_fleet_end_to_end(tmp_path: Path, procs: Procs, fleet: tuple[list[str], int]) -> None:
    prometheus = need("prometheus")
    targets, stops_driven = fleet
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(
            {  # JSON is YAML
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES / "rules.yml"), str(RULES / "alerts.yml")],
                "scrape_configs": [
                    {"job_name": "turnwatch", "static_configs": [{"targets": targets}]},
                    {"job_name": spec.WATCHDOG_JOB, "static_configs": [{"targets": targets[1:]}]},
                ],
            }
        )
    )
    with (tmp_path / "prometheus.log").open("w") as log:  # the child keeps its own copy
        procs.spawn(
            [
                prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path}/tsdb",
                f"--web.listen-address=127.0.0.1:{port}",
                "--enable-feature=exemplar-storage",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    api = f"http://127.0.0.1:{port}/api/v1"

    def query(expr: str) -> list[Any]:
        expr = expr.replace("$__rate_interval", "1m")
        data = get(f"{api}/query?query={urllib.parse.quote(expr)}")
        assert data["status"] == "success", (expr, data)
        return list(data["data"]["result"])

    def ready() -> bool:
        try:
            return bool(query('sum(turnwatch_stops_total{job="turnwatch"})'))
        except OSError:
            return False

    wait_until(ready, timeout=60, what="Prometheus to scrape both hosts")
    # The stops summed over both instances equal the stops driven.
    wait_until(
        lambda: (
            float(query('sum(turnwatch_stops_total{job="turnwatch"})')[0]["value"][1])
            >= stops_driven
        ),
        timeout=30,
        what="every stop to be scraped",
    )
    total = float(query('sum(turnwatch_stops_total{job="turnwatch"})')[0]["value"][1])
    assert total == stops_driven + 1  # + the pinned legacy session host b's watchdog recovered
    assert len(query('sum by (instance) (turnwatch_stops_total{job="turnwatch"})')) == 2
    exprs = [q.expr for d in spec.DASHBOARDS for p in d.panels for q in p.queries]
    exprs += [r.record for r in spec.RECORDINGS] + [a.query for a in spec.ALERTS]
    for expr in exprs:
        wait_until(functools.partial(query, expr), timeout=60, what=f"data for {expr}")
    now = time.time()
    ex = get(
        f"{api}/query_exemplars?query=turnwatch_stop_to_settle_seconds_bucket"
        f"&start={now - 600}&end={now}"
    )
    assert ex["status"] == "success"
    labels = [e["labels"] for series in ex["data"] for e in series["exemplars"]]
    assert labels, "stop_to_settle exemplars reach Prometheus"
    assert all(len(lab["trace_id"]) == 32 for lab in labels)


def test_the_deploy_guides_promtool_commands_pass() -> None:
    """The commands docs/deploy.md tells people to run, run as written."""
    promtool = need("promtool")
    text = (ROOT / "docs" / "deploy.md").read_text()
    commands = [ln.strip() for ln in text.splitlines() if "promtool " in ln and ln.strip()]
    assert len(commands) == 2, commands
    for cmd in commands:
        result = subprocess.run(
            cmd.replace("promtool ", f"{promtool} "),
            shell=True,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, (cmd, result.stdout, result.stderr)

"""Every rule expression and every dashboard query returns series on live data, not just parses.

One local stack (`streamstack.local.stack.LocalStack`) runs the clickstream-windows job, its producer, the
lag exporter, the broker with Strimzi's metrics reporter (the `kafka_*` names a Strimzi cluster exports) and
Prometheus (2 s scrape and rule evaluation, rules loaded from monitoring/rules/*.yaml). Once
its series exist, each rule's expression (an alert's threshold comparison stripped, `absent(x)` checked as
`x`, each side of and/or/unless checked on its own) and each generated dashboard's panel queries (template
variables substituted as Grafana does, once with "All" and once with the job and topic chosen) must return
at least one series from the live Prometheus. What can only exist in a cluster is listed in CLUSTER_ONLY with
the reason (a kubelet or kube-state-metrics); those expressions must still parse with promtool and run on the
live Prometheus without error. An operand of a rule on a cluster-only metric is checked that way too, while
its local operands (StreamstackContainerRestarting's streamstack_local_child_restarts_total) must return
series.
The same stack feeds `streamstack panels`, whose PNG is checked.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from streamstack.local.pipeline import streaming_pipeline
from streamstack.local.prometheus import KAFKA_SCRAPE_JOB, query_prometheus
from streamstack.local.stack import LocalStack, LocalStackOptions
from streamstack.panels import render_overview
from streamstack.rehearsal.panels import ALL_VALUES, dashboards, grafana_substitute
from streamstack.runtimes import Runtimes
from tests.monitoring.test_rules import load_rules, promtool, rule_files

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

JOB = "clickstream-windows"
TOPIC = "page-views"

KUBELET = (
    "kubelet_volume_stats_* are exported by the kubelet for mounted PersistentVolumeClaims; local "
    "checkpoints are plain directories"
)
KUBE_STATE_METRICS = "kube_pod_container_status_restarts_total comes from kube-state-metrics"
CLUSTER_ONLY: dict[str, str] = {
    "alert StreamstackCheckpointVolumeFillingUp": KUBELET,
    "alert StreamstackCheckpointVolumeAlmostFull": KUBELET,
    "variable namespace": (
        "Prometheus adds `namespace` only to targets it discovers in Kubernetes; locally the variable has "
        "no values and 'All' (.*) matches series without the label"
    ),
}
CLUSTER_METRICS = ("kubelet_volume_stats_", "kube_pod_container_status_restarts_total")
# Rules on series that only another job's query writes (the live stack runs JOB alone), with where their
# series are checked instead. Like CLUSTER_ONLY, they are parsed by promtool (tests/monitoring/test_rules.py).
OTHER_JOBS_ONLY: dict[str, str] = {
    "alert StreamstackViewBurstOverThreshold": (
        "counts the records of view-bursts' `<name>.alerts` query (checked in tests/jobs/test_view_bursts.py)"
    ),
    "alert StreamstackTransitionsRejected": (
        "counts order-state's invalid_transition dead letters (checked in tests/jobs/test_order_state.py and "
        "tests/faults/test_order_state_sigkill.py)"
    ),
}
# Rules and panels on the CDC source (the replication slot, Kafka Connect's JMX exporter): the live stack here
# runs no job that reads a captured table, so no PostgreSQL or Connect. tests/cdc/test_source_lag.py checks
# each of them against a live Prometheus scraping a real exporter, slot and Connect worker.
_CDC = "checked live in tests/cdc/test_source_lag.py (this stack runs no CDC source)"
CDC_ONLY: dict[str, str] = {
    **{
        f"alert {name}": _CDC
        for name in (
            "StreamstackCdcConnectorFailed",
            "StreamstackCdcTaskFailed",
            "StreamstackCdcSlotInactive",
            "StreamstackCdcRetainedWalFillingDisk",
            "StreamstackCdcSourceLagHigh",
            "StreamstackCdcSourceUnreachable",
        )
    },
    "panel streamstack-pipeline-overview/Source lag in seconds (CDC)": _CDC,
    "panel streamstack-pipeline-overview/Source lag and retained WAL in bytes (CDC)": _CDC,
}
# End-to-end freshness needs a job fed by Debezium (commit times in a header): checked live in
# tests/cdc/test_cdc_freshness.py against a Prometheus scraping the user-view driver.
_FRESHNESS = "checked live in tests/cdc/test_cdc_freshness.py (this stack runs no CDC-fed job)"
FRESHNESS_ONLY: dict[str, str] = {
    "alert StreamstackFreshnessAboveSLO": _FRESHNESS,
    "panel streamstack-pipeline-overview/End-to-end freshness (CDC)": _FRESHNESS,
}
NOT_LOCAL = {**CLUSTER_ONLY, **OTHER_JOBS_ONLY, **CDC_ONLY, **FRESHNESS_ONLY}


def is_cluster_only(query: str) -> bool:
    return any(metric in query for metric in CLUSTER_METRICS)


READY_TIMEOUT_S = 180.0


# --- which expressions to run -------------------------------------------------------------------------------

_SET_OPERATORS = (("or",), ("and", "unless"))
_COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")
_MODIFIERS = re.compile(
    r"^\s*(bool\s+)?((on|ignoring)\s*\([^)]*\)\s*)?((group_left|group_right)\s*(\([^)]*\))?\s*)?"
)
_NUMBER = re.compile(r"[\d.\s*+/()eE-]+")
_ABSENT = re.compile(r"absent(_over_time)?\((?P<inner>.*)\)", re.DOTALL)


def _top_level_operators(expr: str, operators: tuple[str, ...]) -> list[tuple[int, int]]:
    """(start, end) of each operator outside parentheses, brackets, braces and strings."""
    found, depth, index, quote = [], 0, 0, ""
    while index < len(expr):
        char = expr[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "\"'`":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0:
            for operator in operators:
                if not expr.startswith(operator, index):
                    continue
                end = index + len(operator)
                if operator.isalpha():
                    before = expr[index - 1] if index else " "
                    after = expr[end] if end < len(expr) else " "
                    if not (before in " \n)" and after in " \n("):
                        continue
                found.append((index, end))
                index = end - 1
                break
        index += 1
    return found


def _strip_outer_parentheses(expr: str) -> str:
    expr = expr.strip()
    while expr.startswith("(") and expr.endswith(")"):
        depth = 0
        for index, char in enumerate(expr):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0 and index < len(expr) - 1:
                return expr  # "(a) and (b)": the first parenthesis closes before the end
        expr = expr[1:-1].strip()
    return expr


def underlying(expr: str) -> list[str]:
    """The queries whose series an expression is built on: a threshold comparison against a number dropped,
    each operand of and/or/unless (and of a comparison of two vectors) on its own, `absent(x)` as `x`."""
    expr = _strip_outer_parentheses(expr)
    for operators in (*_SET_OPERATORS, _COMPARISONS):
        positions = _top_level_operators(expr, operators)
        if positions:
            bounds = [0, *[edge for start, end in positions for edge in (start, end)], len(expr)]
            parts = [expr[bounds[i] : bounds[i + 1]] for i in range(0, len(bounds), 2)]
            queries = []
            for part in parts:
                operand = _MODIFIERS.sub("", part, count=1).strip()
                if not _NUMBER.fullmatch(operand):
                    queries.extend(underlying(operand))
            return queries
    absent = _ABSENT.fullmatch(expr)
    if absent:
        inner = absent.group("inner").strip()
        return underlying(re.sub(r"\[[^\]]*\]$", "", inner) if absent.group(1) else inner)
    return [expr]


def test_underlying_strips_thresholds_and_splits_operands() -> None:
    assert underlying("max by (q) (x) > 300") == ["max by (q) (x)"]
    assert underlying("a > bool 60") == ["a"]
    assert underlying("(delta(a[10m]) == 0)\nand on (t, p)\n(delta(b[10m]) > 0)\nand\n(c > 0)") == [
        "delta(a[10m])",
        "delta(b[10m])",
        "c",
    ]
    assert underlying("max(a) == 0\nunless on (q)\nmax(b) == 1") == ["max(a)", "max(b)"]
    assert underlying("r1 > (14.4 * 0.01) and r2 > (14.4 * 0.01)") == ["r1", "r2"]
    assert underlying('absent(up{job=~"x"})') == ['up{job=~"x"}']
    assert underlying("time() - max(t) > 300") == ["time() - max(t)"]
    assert underlying('rate(x{a!="b", c=~"(d|e)"}[5m]) / rate(y[5m]) > 0.01') == [
        'rate(x{a!="b", c=~"(d|e)"}[5m]) / rate(y[5m])'
    ]


@dataclass(frozen=True)
class Check:
    key: str  # "alert <name>", "record <name>", "panel <uid>/<title>"
    queries: tuple[str, ...]

    def local_part(self) -> Check:
        return Check(self.key, tuple(query for query in self.queries if not is_cluster_only(query)))


def rule_checks() -> list[Check]:
    checks = []
    for rule in load_rules():
        queries = tuple(underlying(rule.expr))
        if rule.kind == "record":
            queries = (rule.expr, rule.name)  # the expression, and the series Prometheus recorded from it
        checks.append(Check(rule.key, queries))
    return checks


CHOSEN_VALUES = {"namespace": ".*", "job": JOB, "topic": TOPIC}


def panel_checks() -> list[Check]:
    checks = []
    for uid, dashboard in dashboards().items():
        for panel in dashboard["panels"]:
            if panel["type"] == "row":
                continue
            queries = tuple(
                grafana_substitute(target["expr"], values)
                for target in panel["targets"]
                for values in (ALL_VALUES, CHOSEN_VALUES)
            )
            checks.append(Check(f"panel {uid}/{panel['title']}", queries))
    return checks


def test_cluster_only_list_is_current_and_justified() -> None:
    """Every entry names an existing rule or panel and really depends on a cluster-only metric."""
    checks = {check.key: check for check in [*rule_checks(), *panel_checks()]}
    for key in CLUSTER_ONLY:
        if key.startswith("variable "):
            continue
        assert key in checks, f"CLUSTER_ONLY names {key}, which does not exist"
        text = " ".join(checks[key].queries)
        assert any(metric in text for metric in CLUSTER_METRICS), f"{key} uses no cluster-only metric"
    for key in OTHER_JOBS_ONLY:
        assert key in checks, f"OTHER_JOBS_ONLY names {key}, which does not exist"
    for key in CDC_ONLY:
        assert key in checks, f"CDC_ONLY names {key}, which does not exist"
    for key in FRESHNESS_ONLY:
        assert key in checks, f"FRESHNESS_ONLY names {key}, which does not exist"
    local = [key for key, check in checks.items() if key not in CLUSTER_ONLY]
    for key in local:
        assert checks[key].local_part().queries, f"{key}: only cluster-only metrics"


# --- the live stack -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveStack:
    prometheus_url: str
    workdir: Path


@pytest.fixture(scope="module")
def live(runtimes: Runtimes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    workdir = tmp_path_factory.mktemp("live-queries")
    options = LocalStackOptions.on_free_ports(
        workdir,
        rate=50.0,
        trigger_interval="2 seconds",
    )
    stack = LocalStack(runtimes, streaming_pipeline().only([JOB]), options)
    try:
        state = stack.up()
        yield LiveStack(state["prometheus"]["url"], workdir)
    finally:
        stack.down()


def returns_series(url: str, promql: str) -> bool:
    return bool(query_prometheus(url, promql, timeout=15))


def empty_queries(url: str, checks: list[Check]) -> dict[str, list[str]]:
    empty: dict[str, list[str]] = {}
    for check in checks:
        missing = [query for query in check.queries if not returns_series(url, query)]
        if missing:
            empty[check.key] = missing
    return empty


@pytest.fixture(scope="module")
def ready(live: LiveStack) -> LiveStack:
    """Wait until every local rule and panel query returns series (or the deadline: the tests then show
    which do not)."""
    local = [check.local_part() for check in [*rule_checks(), *panel_checks()] if check.key not in NOT_LOCAL]
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if not empty_queries(live.prometheus_url, local):
                break
        except OSError:
            pass
        time.sleep(5)
    return live


def test_local_prometheus_evaluates_every_rule_file(ready: LiveStack) -> None:
    with urllib.request.urlopen(f"{ready.prometheus_url}/api/v1/rules", timeout=10) as response:
        groups = json.load(response)["data"]["groups"]
    loaded = {(Path(group["file"]).name, group["name"]) for group in groups}
    expected = {
        (path.name, group["name"])
        for path in rule_files()
        for group in yaml.safe_load(path.read_text())["groups"]
    }
    assert loaded == expected
    rules = [rule for group in groups for rule in group["rules"]]
    assert len(rules) == len(load_rules())
    assert [rule["name"] for rule in rules if rule["health"] != "ok" or rule.get("lastError")] == []


def test_every_rule_expression_returns_series(ready: LiveStack) -> None:
    checks = [check.local_part() for check in rule_checks() if check.key not in NOT_LOCAL]
    assert len(checks) >= 25
    assert empty_queries(ready.prometheus_url, checks) == {}


def test_every_dashboard_panel_query_returns_series(ready: LiveStack) -> None:
    checks = [check for check in panel_checks() if check.key not in NOT_LOCAL]
    assert len(checks) >= 30
    assert empty_queries(ready.prometheus_url, checks) == {}


def _label_values(url: str, label_values_query: str, regex: str = "") -> set[str]:
    """What Grafana's `label_values(series, label)` lists: the label's values on the matching series."""
    match = re.fullmatch(r"label_values\((?P<series>.+), (?P<label>\w+)\)", label_values_query)
    assert match, label_values_query
    series = grafana_substitute(match.group("series"), ALL_VALUES)
    parameters = urllib.parse.urlencode({"match[]": series})
    with urllib.request.urlopen(f"{url}/api/v1/series?{parameters}", timeout=10) as response:
        found = json.load(response)["data"]
    values = {labels[match.group("label")] for labels in found if match.group("label") in labels}
    if regex:
        pattern = re.compile(regex.strip("/"))
        values = {found.group(1) for value in values if (found := pattern.search(value))}
    return values


def kafka_metric_names(checks: list[Check]) -> set[str]:
    """The broker metrics the checks name; `kafka_connect_*` are Kafka Connect's (its JMX exporter, scrape job
    `kafka-connect`), checked live in tests/cdc/test_source_lag.py."""
    return {
        name
        for check in checks
        for query in check.queries
        for name in re.findall(r"\bkafka_\w+", query)
        if not name.startswith("kafka_connect_")
    }


def test_kafka_panels_and_alerts_read_the_brokers_metrics_reporter(ready: LiveStack) -> None:
    """Every broker metric a Kafka panel or alert names is scraped from the local broker's metrics reporter
    (scrape job `kafka`), under that exact name."""
    names = kafka_metric_names([*rule_checks(), *panel_checks()])
    assert {
        "kafka_server_brokertopicmetrics_messagesinpersec_total",
        "kafka_server_replicamanager_underreplicatedpartitions",
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "kafka_cluster_partition_underminisr",
    } <= names
    missing = [
        name
        for name in sorted(names)
        if not returns_series(ready.prometheus_url, f'{name}{{job="{KAFKA_SCRAPE_JOB}"}}')
    ]
    assert missing == []


def test_template_variables_list_the_running_job_and_its_topic(ready: LiveStack) -> None:
    for uid, dashboard in dashboards().items():
        variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
        job = variables["job"]
        assert _label_values(ready.prometheus_url, job["query"], job["regex"]) == {JOB}, uid
        namespace = variables["namespace"]
        assert _label_values(ready.prometheus_url, namespace["query"]) == set(), (
            f"{uid}: locally there is no namespace label (CLUSTER_ONLY 'variable namespace')"
        )
        if "topic" in variables:
            assert TOPIC in _label_values(ready.prometheus_url, variables["topic"]["query"]), uid


def test_cluster_only_expressions_parse_and_run(ready: LiveStack, runtimes: Runtimes, tmp_path: Path) -> None:
    checks = [check for check in [*rule_checks(), *panel_checks()] if check.key in CLUSTER_ONLY]
    assert len(checks) == len([key for key in CLUSTER_ONLY if not key.startswith("variable ")])
    cluster_queries = [
        query
        for check in [*rule_checks(), *panel_checks()]
        for query in check.queries
        if is_cluster_only(query)
    ]
    assert len(cluster_queries) > sum(len(check.queries) for check in checks)  # the restart alert's too
    rules = [
        {"record": f"cluster_only:check_{index}", "expr": query}
        for index, query in enumerate(cluster_queries)
    ]
    rule_file = tmp_path / "cluster-only.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "cluster-only", "rules": rules}]}))
    result = promtool(runtimes, "check", "rules", rule_file)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout
    for rule in rules:
        assert query_prometheus(ready.prometheus_url, rule["expr"]) == [], "no cluster metrics locally"


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert len(data) > 30_000, f"{path} is only {len(data)} bytes"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 1000 and height >= 600, (width, height)


def test_panels_png_from_live_prometheus(ready: LiveStack, tmp_path: Path) -> None:
    out = tmp_path / "overview.png"
    data = render_overview(ready.prometheus_url, out, minutes=5, job=JOB)
    assert [panel.panel.title for panel in data] == [
        "Lag in seconds",
        "Lag in records",
        "Input vs processed rows per second",
        "Batch utilization",
    ]
    assert [panel.panel.title for panel in data if not panel.has_data] == []
    points = {panel.panel.title: sum(len(series.values) for series in panel.series) for panel in data}
    assert all(count >= 5 for count in points.values()), points
    rates = next(panel for panel in data if panel.panel.title == "Input vs processed rows per second")
    assert max(value for series in rates.series for value in series.values) > 0, "no rows flowed"
    _assert_png(out)


def test_panels_command_writes_a_png(ready: LiveStack, tmp_path: Path) -> None:
    out = tmp_path / "cli" / "overview.png"
    result = subprocess.run(
        [sys.executable, "-m", "streamstack.cli", "panels", "--out", str(out), "--minutes", "5",
         "--workdir", str(ready.workdir)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout
    counts = [int(count) for count in re.findall(r": (\d+) series", result.stdout)]
    assert len(counts) == 4 and all(count >= 1 for count in counts), result.stdout
    _assert_png(out)

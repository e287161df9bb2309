"""The Prometheus rules in monitoring/rules/: valid for promtool 2.42, unit-tested with `promtool test rules`,
every alert documented (severity, summary, description, runbook) and tested both firing and quiet."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from streamstack.runtimes import Runtimes
from tests.conftest import repo_root

RULES_DIR = repo_root() / "monitoring" / "rules"
RULE_TESTS_DIR = RULES_DIR / "tests"
SEVERITIES = ("critical", "warning")


@dataclass(frozen=True)
class Rule:
    file: str
    group: str
    kind: str  # "alert" or "record"
    name: str
    expr: str
    labels: dict[str, str]
    annotations: dict[str, str]

    @property
    def key(self) -> str:
        return f"{self.kind} {self.name}"


def rule_files() -> list[Path]:
    """The files Prometheus loads (monitoring/rules/*.yaml; the promtool tests under tests/ are not)."""
    return sorted(RULES_DIR.glob("*.yaml"))


def load_rules() -> list[Rule]:
    rules = []
    for path in rule_files():
        document: dict[str, Any] = yaml.safe_load(path.read_text())
        for group in document["groups"]:
            for rule in group["rules"]:
                kind = "alert" if "alert" in rule else "record"
                rules.append(
                    Rule(
                        file=path.name,
                        group=group["name"],
                        kind=kind,
                        name=rule[kind],
                        expr=rule["expr"].strip(),
                        labels=rule.get("labels") or {},
                        annotations=rule.get("annotations") or {},
                    )
                )
    return rules


def promtool(runtimes: Runtimes, *args: str | Path) -> subprocess.CompletedProcess[str]:
    assert runtimes.promtool.is_file(), f"promtool missing at {runtimes.promtool}; run `make setup`"
    return subprocess.run(
        [str(runtimes.promtool), *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def test_rule_files_pass_promtool_check(runtimes: Runtimes) -> None:
    files = rule_files()
    assert {path.name for path in files} >= {
        "streamstack-lag.yaml",
        "streamstack-jobs.yaml",
        "streamstack-exporter.yaml",
        "streamstack-platform.yaml",
    }
    result = promtool(runtimes, "check", "rules", *files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(files), result.stdout
    found = sum(int(count) for count in re.findall(r"SUCCESS: (\d+) rules found", result.stdout))
    assert found == len(load_rules())


def test_promtool_unit_tests_pass(runtimes: Runtimes) -> None:
    test_files = sorted(RULE_TESTS_DIR.glob("*.yaml"))
    assert len(test_files) == len(rule_files()), "one promtool test file per rule file"
    result = promtool(runtimes, "test", "rules", *test_files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(test_files), result.stdout
    assert "FAILED" not in result.stdout + result.stderr


def test_promtool_rejects_a_broken_rule_file(runtimes: Runtimes, tmp_path: Path) -> None:
    """The check above would pass vacuously if promtool accepted anything."""
    broken = tmp_path / "broken.yaml"
    broken.write_text("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: rate(x[5m]\n")
    result = promtool(runtimes, "check", "rules", broken)
    assert result.returncode != 0
    assert "unclosed left parenthesis" in result.stdout + result.stderr


def test_every_alert_has_severity_summary_description_and_runbook() -> None:
    alerts = [rule for rule in load_rules() if rule.kind == "alert"]
    assert len(alerts) >= 20
    runbook = (RULES_DIR / "README.md").read_text()
    runbook_sections = {match.lower() for match in re.findall(r"^### (\w+)$", runbook, re.MULTILINE)}
    problems = []
    for alert in alerts:
        if alert.labels.get("severity") not in SEVERITIES:
            problems.append(f"{alert.name}: severity {alert.labels.get('severity')!r}")
        for field in ("summary", "description"):
            if len(alert.annotations.get(field, "").split()) < (3 if field == "summary" else 25):
                problems.append(f"{alert.name}: {field} missing or too short to say what to do")
        if alert.annotations.get("runbook") != f"monitoring/rules/README.md#{alert.name.lower()}":
            problems.append(f"{alert.name}: runbook {alert.annotations.get('runbook')!r}")
        if alert.name.lower() not in runbook_sections:
            problems.append(f"{alert.name}: no '### {alert.name}' section in monitoring/rules/README.md")
        if not alert.name.startswith("Streamstack"):
            problems.append(f"{alert.name}: alert names start with Streamstack")
    assert problems == []
    assert len({alert.name for alert in alerts}) == len(alerts), "alert names are unique"


def _tested_outcomes() -> dict[str, set[str]]:
    """For each alert name, the outcomes its promtool tests expect: "fires" and/or "quiet"."""
    outcomes: dict[str, set[str]] = {}
    for path in sorted(RULE_TESTS_DIR.glob("*.yaml")):
        document: dict[str, Any] = yaml.safe_load(path.read_text())
        for test in document["tests"]:
            for case in test.get("alert_rule_test") or []:
                outcome = "fires" if case.get("exp_alerts") else "quiet"
                outcomes.setdefault(case["alertname"], set()).add(outcome)
    return outcomes


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    alert_names = {rule.name for rule in load_rules() if rule.kind == "alert"}
    outcomes = _tested_outcomes()
    assert {name for name in alert_names if outcomes.get(name) != {"fires", "quiet"}} == set()
    assert set(outcomes) - alert_names == set(), "promtool tests name alerts that do not exist"


def test_rules_use_only_labels_our_series_carry() -> None:
    """Our metrics never carry `job`/`instance` (Prometheus would rename them to exported_*): only the
    exporter's scrape target (`up`) is selected by Prometheus' own job label."""
    for rule in load_rules():
        for selector in re.findall(r"(\w+)\{([^}]*)\}", rule.expr):
            metric, matchers = selector
            if re.search(r"\b(job|instance)\s*[=!]", matchers):
                assert metric == "up", f"{rule.key}: selects {metric} by job/instance"
            assert "exported_" not in matchers, rule.key

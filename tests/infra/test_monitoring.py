"""Monitoring on its own: kube-prometheus-stack values, and rules and dashboards read from files."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from infra.components.monitoring import Monitoring, MonitoringArgs, load_rule_files
from infra.config import RULES_DIR, ConfigError, MonitoringConfig
from tests.infra.conftest import Stack, build

RULE_FILE = {
    "groups": [
        {
            "name": "fixture.alerts",
            "rules": [
                {
                    "alert": "FixtureLagHigh",
                    "expr": "streamstack_lag_group_max_seconds > 60",
                    "for": "5m",
                    "labels": {"severity": "warning"},
                    "annotations": {"summary": "lag above a minute"},
                },
                {"record": "fixture:lag:max", "expr": "max(streamstack_lag_seconds)"},
            ],
        }
    ]
}
DASHBOARD = {"title": "Fixture", "uid": "fixture", "panels": [{"type": "timeseries", "title": "lag"}]}


@pytest.fixture
def fixture_dirs(tmp_path: Path) -> tuple[Path, Path]:
    rules, dashboards = tmp_path / "rules", tmp_path / "dashboards"
    (rules / "tests").mkdir(parents=True)
    dashboards.mkdir()
    (rules / "fixture_rules.yaml").write_text(yaml.safe_dump(RULE_FILE), encoding="utf-8")
    # promtool unit tests live under tests/ and are not rule files.
    (rules / "tests" / "fixture_test.yaml").write_text(
        "rule_files: [../fixture_rules.yaml]\n", encoding="utf-8"
    )
    (dashboards / "fixture-overview.json").write_text(json.dumps(DASHBOARD), encoding="utf-8")
    return rules, dashboards


def build_monitoring(mocked: Callable[[str], Stack], rules: Path, dashboards: Path) -> Stack:
    recorder = mocked("dev")
    build(
        lambda: Monitoring(
            "monitoring",
            MonitoringArgs(
                monitoring=MonitoringConfig(),
                scrape_ports=(9400, 9308),
                rules_dir=rules,
                dashboards_dir=dashboards,
            ),
        )
    )
    return recorder


def test_chart_discovers_monitors_without_release_labels_and_suits_kind(
    mocked: Callable[[str], Stack], tmp_path: Path
) -> None:
    recorder = build_monitoring(mocked, tmp_path / "none", tmp_path / "none")
    (release,) = recorder.of_kind("Release")
    assert (release.inputs["chart"], release.inputs["version"]) == ("kube-prometheus-stack", "88.5.3")
    values = release.inputs["values"]
    spec = values["prometheus"]["prometheusSpec"]
    for selector in ("serviceMonitor", "podMonitor", "rule", "probe"):
        assert spec[f"{selector}SelectorNilUsesHelmValues"] is False
    dashboards = values["grafana"]["sidecar"]["dashboards"]
    assert dashboards == {
        "enabled": True,
        "label": "grafana_dashboard",
        "labelValue": "1",
        "searchNamespace": "ALL",
    }
    for component in ("kubeEtcd", "kubeControllerManager", "kubeScheduler", "kubeProxy"):
        assert values[component]["enabled"] is False
    assert values["prometheus-node-exporter"]["hostRootFsMount"]["enabled"] is False


def test_missing_rule_and_dashboard_directories_install_nothing(
    mocked: Callable[[str], Stack], tmp_path: Path
) -> None:
    recorder = build_monitoring(mocked, tmp_path / "no-rules", tmp_path / "no-dashboards")
    assert recorder.of_kind("PrometheusRule") == []
    assert recorder.of_kind("ConfigMap") == []


def test_each_rule_file_becomes_a_prometheus_rule_with_its_groups(
    mocked: Callable[[str], Stack], fixture_dirs: tuple[Path, Path]
) -> None:
    recorder = build_monitoring(mocked, *fixture_dirs)
    (rule,) = recorder.of_kind("PrometheusRule")
    assert rule.inputs["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule.metadata == {**rule.metadata, "name": "fixture-rules", "namespace": "monitoring"}
    assert rule.spec["groups"] == RULE_FILE["groups"]


def test_each_dashboard_becomes_a_configmap_the_grafana_sidecar_picks_up(
    mocked: Callable[[str], Stack], fixture_dirs: tuple[Path, Path]
) -> None:
    recorder = build_monitoring(mocked, *fixture_dirs)
    (config_map,) = recorder.of_kind("ConfigMap")
    assert config_map.metadata["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map.inputs["data"]["fixture-overview.json"]) == DASHBOARD


def test_the_repositorys_rule_files_all_become_prometheus_rules(
    mocked: Callable[[str], Stack], tmp_path: Path
) -> None:
    rule_files = sorted(RULES_DIR.glob("*.yaml"))
    recorder = build_monitoring(mocked, RULES_DIR, tmp_path / "none")
    rules = {rule.metadata["name"]: rule.spec["groups"] for rule in recorder.of_kind("PrometheusRule")}
    assert len(rules) == len(rule_files)
    for path in rule_files:
        assert (
            rules[path.stem.lower().replace("_", "-")]
            == yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
        )


def test_a_file_that_is_not_a_rule_file_fails_naming_it(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("rules:\n  - alert: X\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(str(tmp_path / "broken.yaml"))):
        load_rule_files(tmp_path)
    (tmp_path / "broken.yaml").write_text(
        "groups:\n  - name: g\n    rules:\n      - alert: X\n        exprr: up == 0\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError, match="unknown field exprr"):
        load_rule_files(tmp_path)

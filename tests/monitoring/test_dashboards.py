"""The Grafana dashboards: generated JSON is what the specs render today, and is importable as it is (uid,
title, datasource and template variables, unique ids, every query parses)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitoring.dashboards import build
from monitoring.dashboards.spec import substitute
from streamstack.local.kafka import METRICS_ALLOWLIST, STRIMZI_METRICS_ALLOWLIST
from streamstack.runtimes import Runtimes
from tests.monitoring.test_rules import load_rules, promtool

GENERATED = build.GENERATED_DIR
EXPECTED_UIDS = {"streamstack-pipeline-overview", "streamstack-kafka", "streamstack-lag-exporter"}
PANEL_TYPES = {"timeseries", "stat"}


def generated_dashboards() -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(GENERATED.glob("*.json"))}


def query_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in dashboard["panels"] if panel["type"] != "row"]


def test_generated_json_is_up_to_date(tmp_path: Path) -> None:
    fresh = tmp_path / "generated"
    written = build.write_all(fresh)
    assert {path.name for path in written} == {path.name for path in GENERATED.glob("*.json")}, (
        "generated/ has missing or extra dashboards; run `make dashboards`"
    )
    for path in written:
        assert path.read_text() == (GENERATED / path.name).read_text(), (
            f"{path.name} is out of date; run `make dashboards`"
        )
    assert build.main(["--check", "--out", str(GENERATED)]) == 0


def test_check_mode_reports_a_stale_dashboard(tmp_path: Path) -> None:
    copy = tmp_path / "generated"
    shutil.copytree(GENERATED, copy)
    stale = copy / "streamstack-kafka.json"
    stale.write_text(stale.read_text().replace("Streamstack / Kafka", "Streamstack / Kafka (edited)"))
    (copy / "stray.json").write_text("{}")
    assert build.stale_files(copy) == ["streamstack-kafka.json", "stray.json"]
    assert build.main(["--check", "--out", str(copy)]) == 1


def test_dashboards_have_uid_title_and_template_variables() -> None:
    dashboards = generated_dashboards()
    assert set(dashboards) == EXPECTED_UIDS
    for uid, dashboard in dashboards.items():
        assert dashboard["uid"] == uid
        assert dashboard["title"].startswith("Streamstack / ")
        assert isinstance(dashboard["schemaVersion"], int)
        assert "id" not in dashboard or dashboard["id"] is None, "an imported dashboard must not carry an id"
        assert dashboard["annotations"]["list"], "Grafana needs annotations.list"
        variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        for name, label in (("namespace", "namespace"), ("job", "query")):
            variable = variables[name]
            assert variable["type"] == "query"
            assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert re.fullmatch(
                rf"label_values\(streamstack_query_active(\{{.*\}})?, {label}\)", variable["query"]
            )
            assert variable["includeAll"] and variable["multi"] and variable["allValue"] == ".*"
        assert variables["job"]["regex"] == "/^([^.]+)/"
        assert 'namespace=~"$namespace"' in variables["job"]["query"], "job values follow the namespace"


def test_panels_are_structurally_sane() -> None:
    for uid, dashboard in generated_dashboards().items():
        ids = [panel["id"] for panel in dashboard["panels"]]
        assert len(ids) == len(set(ids)), f"{uid}: panel ids repeat"
        defined = {variable["name"] for variable in dashboard["templating"]["list"]} | {"__rate_interval"}
        titles = []
        for panel in query_panels(dashboard):
            where = f"{uid}/{panel['title']}"
            titles.append(panel["title"])
            assert panel["type"] in PANEL_TYPES, where
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
            assert len(panel["description"]) > 20, where
            position = panel["gridPos"]
            assert position["x"] + position["w"] <= 24 and position["h"] > 0, where
            assert panel["options"], f"{where}: Grafana wants options, not null"
            ref_ids = [target["refId"] for target in panel["targets"]]
            assert ref_ids and len(ref_ids) == len(set(ref_ids)) and all(ref_ids), where
            for target in panel["targets"]:
                used = set(re.findall(r"\$\{?(\w+)\}?", target["expr"]))
                assert used <= defined, f"{where}: undefined variables {used - defined}"
                assert 'namespace=~"$namespace"' in target["expr"], f"{where}: not filtered by namespace"
                assert target["legendFormat"], where
        assert len(titles) == len(set(titles)), f"{uid}: panel titles repeat"


# The broker metrics that Strimzi 1.2.0's own dashboards for its metrics reporter read (strimzi-kafka-operator
# tag 1.2.0, packaging/examples/metrics/strimzi-metrics-reporter/grafana-dashboards/strimzi-kafka.json).
STRIMZI_REPORTER_DASHBOARD_METRICS = {
    "kafka_cluster_partition_atminisr",
    "kafka_cluster_partition_replicascount",
    "kafka_cluster_partition_underminisr",
    "kafka_controller_controllerstats_uncleanleaderelectionspersec_total",
    "kafka_controller_kafkacontroller_activecontrollercount",
    "kafka_controller_kafkacontroller_offlinepartitionscount",
    "kafka_log_log_size",
    "kafka_network_socketserver_networkprocessoravgidlepercent",
    "kafka_server_brokertopicmetrics_bytesinpersec_total",
    "kafka_server_brokertopicmetrics_bytesoutpersec_total",
    "kafka_server_brokertopicmetrics_failedfetchrequestspersec_total",
    "kafka_server_brokertopicmetrics_failedproducerequestspersec_total",
    "kafka_server_brokertopicmetrics_messagesinpersec_total",
    "kafka_server_brokertopicmetrics_totalfetchrequestspersec_total",
    "kafka_server_brokertopicmetrics_totalproducerequestspersec_total",
    "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent_total",
    "kafka_server_kafkaserver_linux_disk_read_bytes",
    "kafka_server_kafkaserver_linux_disk_write_bytes",
    "kafka_server_replicamanager_leadercount",
    "kafka_server_replicamanager_partitioncount",
    "kafka_server_replicamanager_underreplicatedpartitions",
    "kafka_server_socket_server_metrics_connection_count",
}


def allows(allowlist: tuple[str, ...], metric: str) -> bool:
    """Whether the reporter exports `metric` under `allowlist`: it matches a metric's name before the `_total`
    of a counter against the regexes (`prometheus.metrics.reporter.allowlist`)."""
    return any(re.fullmatch(entry, metric.removesuffix("_total")) for entry in allowlist)


def kafka_metrics(texts: list[str]) -> set[str]:
    """Broker metric names; Kafka Connect's (`kafka_connect_*`, its JMX exporter's) are not the broker's."""
    return {
        name
        for text in texts
        for name in re.findall(r"\bkafka_[a-z_]+", text)
        if not name.startswith("kafka_connect_")
    }


def test_kafka_metrics_are_strimzi_reporter_names_that_a_cluster_and_the_local_broker_export() -> None:
    """Every broker metric a panel or alert queries is one Strimzi's reporter dashboards read too; Strimzi's
    default allowlist (what our Kafka CR exports) keeps it, and so does the local broker's allowlist, whose
    entries are Strimzi's own. Metrics that descriptions point operators to are exported by a cluster too."""
    panels = [panel for dashboard in generated_dashboards().values() for panel in query_panels(dashboard)]
    rules = load_rules()
    queried = kafka_metrics(
        [target["expr"] for panel in panels for target in panel["targets"]] + [rule.expr for rule in rules]
    )
    mentioned = kafka_metrics(
        [panel["description"] for panel in panels]
        + [text for rule in rules for text in rule.annotations.values()]
    )
    assert "kafka_server_brokertopicmetrics_messagesinpersec_total" in queried
    assert sorted(queried - STRIMZI_REPORTER_DASHBOARD_METRICS) == []
    assert [name for name in sorted(queried | mentioned) if not allows(STRIMZI_METRICS_ALLOWLIST, name)] == []
    assert [name for name in sorted(queried) if not allows(METRICS_ALLOWLIST, name)] == []
    assert set(METRICS_ALLOWLIST) <= set(STRIMZI_METRICS_ALLOWLIST)


def test_overview_covers_what_operators_need() -> None:
    overview = generated_dashboards()["streamstack-pipeline-overview"]
    exprs = " ".join(target["expr"] for panel in query_panels(overview) for target in panel["targets"])
    for metric in (
        "streamstack_lag_group_records",
        "streamstack_lag_group_max_seconds",
        "streamstack_query_input_rows_per_second",
        "streamstack_query_processed_rows_per_second",
        "streamstack_query_batch_utilization",
        "streamstack_query_rate_limited",
        "streamstack_query_watermark_delay_seconds",
        "streamstack_query_state_rows",
        "streamstack_query_rows_dropped_by_watermark_total",
        "streamstack_query_dead_letters_total",
    ):
        assert metric in exprs, metric
    # The CDC source's panels: the database feeds every job that reads its changelogs, not one job.
    assert "streamstack_lag_source_lag_seconds" in exprs and "streamstack_lag_source_lag_bytes" in exprs
    for panel in query_panels(overview):
        if "(CDC)" in panel["title"]:
            continue
        for target in panel["targets"]:
            assert "$job" in target["expr"], f"{panel['title']}: not filtered by job"


@pytest.mark.parametrize("uid", sorted(EXPECTED_UIDS))
def test_every_panel_query_parses_with_promtool(uid: str, runtimes: Runtimes, tmp_path: Path) -> None:
    """Each query, variables substituted as Grafana would, as a recording rule: promtool parses it."""
    dashboard = generated_dashboards()[uid]
    values = {"namespace": ".*", "job": "clickstream-windows", "topic": "page-views", "datasource": "unused"}
    rules = [
        {
            "record": f"dashboard_check:{panel['id']}_{target['refId']}",
            "expr": substitute(target["expr"], values),
        }
        for panel in query_panels(dashboard)
        for target in panel["targets"]
    ]
    rules += [{"record": "dashboard_check:annotation", "expr": dashboard["annotations"]["list"][0]["expr"]}]
    rule_file = tmp_path / f"{uid}.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": uid, "rules": rules}]}))
    result = promtool(runtimes, "check", "rules", rule_file)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout

"""`streamstack local up` with the database as the changelog source (the default): PostgreSQL, Kafka Connect
with the catalogue's connector and the application workload replace the synthetic changelog producer, and
`down` leaves nothing behind."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from contracts.cdc import cdc_source
from streamstack.local.identity import ProcessIdentity
from streamstack.local.pipeline import Pipeline, streaming_pipeline
from streamstack.local.stack import DEFAULT_CHANGELOG_SOURCE, LocalStack, LocalStackOptions
from streamstack.runtimes import Runtimes
from tests.kafka_helpers import read_records, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_default_stack_captures_the_changelogs_from_postgresql_and_stops_everything(
    runtimes: Runtimes, tmp_path: Path
) -> None:
    assert DEFAULT_CHANGELOG_SOURCE == "database"
    catalogue = streaming_pipeline()
    source = cdc_source()
    changelog = [p for p in catalogue.producers if set(p.flags) & set(source.topics)]
    assert changelog  # the synthetic producer the database replaces
    stack = LocalStack(
        runtimes, Pipeline(catalogue.topics, tuple(changelog), ()), LocalStackOptions.on_free_ports(tmp_path)
    )
    try:
        state = stack.up()
        assert [producer["name"] for producer in state["producers"]] == ["cdc-workload"]
        assert {entry["kind"] for entry in state["processes"]} >= {
            "kafka",
            "postgres",
            "connect",
            "prometheus",
        }
        url = f"{state['cdc']['connect_url']}/connectors/{source.connector_name}/status"
        with urllib.request.urlopen(url, timeout=10) as response:
            status = json.load(response)
        assert status["connector"]["state"] == "RUNNING"
        assert [task["state"] for task in status["tasks"]] == ["RUNNING"]

        bootstrap = state["kafka"]["bootstrap_servers"]
        wait_for(
            lambda: all(len(read_records(bootstrap, topic)) >= 5 for topic in source.topics),
            timeout=90,
            what="the workload's changes on both changelogs",
        )
        assert stack.supervise() == []
        with (tmp_path / "state.json").open() as file:
            assert json.load(file)["cdc"]["connector"] == source.connector_name
    finally:
        stack.down()
    recorded = [int(entry["pid"]) for entry in state["processes"]]
    assert [pid for pid in recorded if ProcessIdentity.of(pid) is not None] == []
    # The database's data directory goes with the run (outside the work directory when running as root).
    pointer = tmp_path / "run" / "postgres" / "postgres-data"
    data_dir = Path(pointer.read_text().strip()) if pointer.exists() else pointer.with_name("postgres")
    assert not data_dir.exists()

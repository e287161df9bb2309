"""`streamstack status` against a real lag exporter process on real Kafka, and a real job metrics endpoint.

Consumer groups, a shadow group and a Spark checkpoint with known lag are set up at rest; every lag number the
command prints is checked against the Kafka admin API (and the checkpoint file the test wrote). Backpressure
comes from the jobs' own progress collector (`jobs.common.progress`) fed Structured Streaming progress
reports, served over HTTP by prometheus_client, so no Spark runs here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.consumer import OffsetSpec
from kafka.structs import OffsetAndMetadata
from prometheus_client import CollectorRegistry, start_http_server

from jobs.common.progress import QueryProgressCollector, QueryProgressStore
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.ports import free_port
from tests.conftest import repo_root
from tests.kafka_helpers import scrape, wait_for
from tests.monitoring.checkpoints import write_query_checkpoint
from tests.monitoring.exporter_process import ExporterProcess, running_exporter

pytestmark = pytest.mark.integration

RECORD_AGE_SECONDS = 600  # the records were produced with timestamps this old (and one second apart)
COUNTS = (10, 6)  # records per partition
TRIGGER_SECONDS = 2.0


@dataclass(frozen=True)
class Scenario:
    topic: str
    query: str
    groups: dict[str, dict[int, int]]  # ordinary and shadow groups: partition -> committed offset
    checkpoint_offsets: dict[int, int]  # what the checkpoint's last committed batch processed
    timestamps_ms: dict[int, list[int]]  # partition -> timestamp of the record at each offset
    exporter: ExporterProcess
    exporter_started: float
    job_metrics_url: str

    @property
    def checkpoint_group(self) -> str:
        return f"job/{self.query}"


def _progress(query: str, batch_time: str) -> dict[str, Any]:
    """A Structured Streaming progress report: 5 s of work per 2 s trigger, stopped 40 records short of the
    latest offsets by maxOffsetsPerTrigger, watermark 6 s behind the batch."""
    return {
        "id": f"{query}-id",
        "name": query,
        "batchId": 3,
        "timestamp": batch_time,
        "numInputRows": 100,
        "inputRowsPerSecond": 50.0,
        "processedRowsPerSecond": 20.0,
        "durationMs": {"triggerExecution": 5000, "addBatch": 4500},
        "eventTime": {"watermark": batch_time.replace(":10.000Z", ":04.000Z")},
        "stateOperators": [],
        "sources": [{"endOffset": {"t": {"0": 100}}, "latestOffset": {"t": {"0": 140}}}],
        "sink": {"numOutputRows": -1},
    }


@pytest.fixture(scope="module")
def job_metrics_url() -> Iterator[str]:
    """A job's metrics endpoint as a job serves it, with two queries: one reporting backpressure, and its
    dead-letter query caught up, without a watermark."""
    store = QueryProgressStore()
    store.started("main-id", "status-test-query")
    store.progressed(_progress("status-test-query", "2026-11-22T12:00:10.000Z"))
    dead_letters = _progress("status-test-query.dead-letters", "2026-11-22T12:00:10.000Z")
    dead_letters["eventTime"] = {}
    dead_letters["durationMs"] = {"triggerExecution": 500}
    dead_letters["sources"] = [{"endOffset": {"t": {"0": 140}}, "latestOffset": {"t": {"0": 140}}}]
    store.started("dead-letters-id", "status-test-query.dead-letters")
    store.progressed(dead_letters)
    registry = CollectorRegistry()
    registry.register(
        QueryProgressCollector(store, trigger_interval_seconds=TRIGGER_SECONDS, rate_limited=True)
    )
    server, thread = start_http_server(0, "127.0.0.1", registry)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _produce_with_timestamps(bootstrap_servers: str, topic: str) -> dict[int, list[int]]:
    start_ms = int(time.time() * 1000) - RECORD_AGE_SECONDS * 1000
    timestamps = {p: [start_ms + offset * 1000 for offset in range(n)] for p, n in enumerate(COUNTS)}
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all")
    try:
        for partition, stamps in timestamps.items():
            for stamp in stamps:
                producer.send(topic, value=b"event", partition=partition, timestamp_ms=stamp)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    return timestamps


def _commit(bootstrap_servers: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
    finally:
        consumer.close(autocommit=False)


@pytest.fixture(scope="module")
def scenario(
    kafka: LocalKafka, job_metrics_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scenario]:
    workdir = tmp_path_factory.mktemp("status")
    topic, query = f"status-{os.getpid()}-{time.monotonic_ns()}", "status-test-query"
    kafka.create_topics([TopicSpec(topic, partitions=2)])
    timestamps = _produce_with_timestamps(kafka.bootstrap_servers, topic)
    groups = {
        f"{topic}-orders": {0: 4, 1: 6},
        f"{topic}-audit": {0: 10, 1: 1},
        f"{topic}-caught-up": {0: 10, 1: 6},
        f"streamstack-{query}": {0: 7, 1: 3},
    }
    for group, offsets in groups.items():
        _commit(kafka.bootstrap_servers, group, topic, offsets)
    checkpoint_offsets = {0: 5, 1: 2}
    write_query_checkpoint(
        workdir / "checkpoints" / query,
        {0: {topic: checkpoint_offsets}, 1: {topic: {0: 8, 1: 6}}},  # batch 1 is still running
        committed=[0],
    )
    started = time.time()
    flags = [
        *("--bootstrap-servers", kafka.bootstrap_servers),
        *("--refresh-interval", "0.5", "--window", "2"),
        *("--group-allow", f"{topic}-.*", "--group-allow", f"streamstack-{query}"),
        *("--checkpoint-dir", f"job={workdir / 'checkpoints'}"),
    ]
    with running_exporter(flags, workdir / "exporter.log") as exporter:
        yield Scenario(
            topic, query, groups, checkpoint_offsets, timestamps, exporter, started, job_metrics_url
        )


@dataclass(frozen=True)
class Truth:
    lag: int
    oldest_unprocessed_ms: int | None  # timestamp of the oldest record not yet processed; None when caught up


def ground_truth(kafka: LocalKafka, scenario: Scenario) -> dict[tuple[str, str], Truth]:
    """{(source, exporter group label): truth}: committed offsets from the admin API (the checkpoint's from
    its file), latest offsets from the admin API."""
    admin = kafka.admin()
    try:
        committed = admin.list_group_offsets(dict.fromkeys(scenario.groups))
        tps = [TopicPartition(scenario.topic, p) for p in range(len(COUNTS))]
        answers = admin.list_partition_offsets(dict.fromkeys(tps, OffsetSpec.LATEST))
        latest = {tp.partition: answer.offset for tp, answer in answers.items()}
    finally:
        admin.close()
    positions = {
        ("shadow" if group.startswith("streamstack-") else "group", group): {
            tp.partition: meta.offset for tp, meta in offsets.items()
        }
        for group, offsets in committed.items()
    }
    positions[("checkpoint", scenario.checkpoint_group)] = scenario.checkpoint_offsets
    truth = {}
    for key, offsets in positions.items():
        behind = [p for p in offsets if offsets[p] < latest[p]]
        truth[key] = Truth(
            lag=sum(latest[p] - offsets[p] for p in offsets),
            oldest_unprocessed_ms=min((scenario.timestamps_ms[p][offsets[p]] for p in behind), default=None),
        )
    return truth


def streamstack(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamstack.cli", *args],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _settled(scenario: Scenario, truth: dict[tuple[str, str], Truth]) -> None:
    """Wait until the exporter reports every consumer, has read the record timestamps, and its status window
    (2 s) has passed: consumers that lag and do not move are then STOP."""

    def ready() -> bool:
        samples = scrape(scenario.exporter.url)
        for (source, group), expected in truth.items():
            labels = f'group="{group}",source="{source}"'
            if samples.get(f"streamstack_lag_group_records{{{labels}}}") != expected.lag:
                return False
            seconds = samples.get(f"streamstack_lag_group_max_seconds{{{labels}}}", 0.0)
            if expected.oldest_unprocessed_ms is not None and seconds < RECORD_AGE_SECONDS / 2:
                return False
            if expected.lag and samples.get(f"streamstack_lag_group_status_code{{{labels}}}") != 3:
                return False
        return True

    wait_for(ready, timeout=45, what=f"the exporter to settle (log {scenario.exporter.log_path})")


def _check_rows(
    rows: list[dict[str, Any]], scenario: Scenario, truth: dict[tuple[str, str], Truth], finished: float
) -> None:
    by_key = {(row["source"], row["group"]): row for row in rows if row["group"] is not None}
    assert set(by_key) == set(truth)
    for key, expected in truth.items():
        row = by_key[key]
        assert row["lag_records"] == expected.lag, key
        if expected.oldest_unprocessed_ms is None:
            assert row["lag_seconds"] == 0.0 and row["status"] == "OK", row
        else:
            oldest = expected.oldest_unprocessed_ms / 1000
            # measured by the exporter at a collection between its start and the command's end
            assert scenario.exporter_started - oldest - 1 <= row["lag_seconds"] <= finished - oldest + 1, row
            assert (row["status"], row["worst_partition_status"]) == ("ERR", "STOP"), row
    kinds = {(row["source"], row["group"]): (row["kind"], row["name"]) for row in rows}
    assert kinds[("shadow", f"streamstack-{scenario.query}")] == ("job", scenario.query)
    assert kinds[("checkpoint", scenario.checkpoint_group)] == ("job", scenario.query)
    assert kinds[("group", f"{scenario.topic}-orders")] == ("group", f"{scenario.topic}-orders")
    for row in rows:
        if row["name"] == scenario.query:
            # 5 s of work per 2 s trigger, capped 40 records short, watermark 6 s behind the batch
            assert (row["batch_utilization"], row["rate_limited"]) == (5.0 / TRIGGER_SECONDS, True), row
            assert row["watermark_delay_seconds"] == 6.0
    [dead_letters] = [row for row in rows if row["name"] == f"{scenario.query}.dead-letters"]
    assert (dead_letters["source"], dead_letters["lag_records"]) == ("-", None)
    assert (dead_letters["rate_limited"], dead_letters["watermark_delay_seconds"]) == (False, None)
    assert dead_letters["batch_utilization"] == 0.5 / TRIGGER_SECONDS


def test_json_rows_carry_the_lag_the_admin_api_reports_and_the_jobs_backpressure(
    kafka: LocalKafka, scenario: Scenario
) -> None:
    truth = ground_truth(kafka, scenario)
    assert truth[("group", f"{scenario.topic}-orders")].lag == 6  # the scenario is what it says
    _settled(scenario, truth)

    result = streamstack(
        "status",
        "--exporter-url",
        scenario.exporter.url,
        "--job-metrics-url",
        scenario.job_metrics_url,
        "--json",
    )
    finished = time.time()

    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["exporter"]["up"] is True and document["exporter"]["stale"] is False
    _check_rows(document["rows"], scenario, truth, finished)


def test_the_table_shows_one_line_per_job_source_and_group(kafka: LocalKafka, scenario: Scenario) -> None:
    truth = ground_truth(kafka, scenario)
    _settled(scenario, truth)

    result = streamstack(
        "status", "--exporter-url", scenario.exporter.url, "--job-metrics-url", scenario.job_metrics_url
    )

    assert result.returncode == 0, result.stderr
    first, header, *lines = result.stdout.splitlines()
    assert first.startswith(f"lag exporter {scenario.exporter.url}: up")
    assert header.split() == [
        *("KIND", "NAME", "SOURCE", "LAG", "LAG", "SECONDS", "STATUS"),
        *("UTILIZATION", "RATE", "LIMITED", "WATERMARK", "DELAY"),
    ]
    cells = {(line.split()[1], line.split()[2]): line.split() for line in lines}
    for (source, group), expected in truth.items():
        name = scenario.query if source in ("shadow", "checkpoint") else group
        row = cells[(name, source)]
        assert int(row[3]) == expected.lag
        if expected.lag == 0:
            assert (row[4], row[5]) == ("0.0", "OK")
        else:
            assert row[5:7] == ["ERR", "(STOP)"]
    assert cells[(scenario.query, "checkpoint")][-3:] == ["2.50", "yes", "6.0s"]
    assert cells[(f"{scenario.query}.dead-letters", "-")][3:] == ["-", "-", "-", "0.25", "no", "-"]
    assert len(lines) == len(truth) + 1  # and the dead-letter query the exporter does not see


def test_local_mode_finds_the_exporter_and_the_jobs_in_the_state_file(
    kafka: LocalKafka, scenario: Scenario, tmp_path: Path
) -> None:
    # The state file `streamstack local up` writes, naming this scenario's exporter and job endpoint; the
    # supervisor is this test process, so the stack counts as running.
    not_started = f"http://127.0.0.1:{free_port()}/metrics"
    state = {
        "supervisor_pid": os.getpid(),
        "workdir": str(tmp_path),
        "ready": True,
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
        "exporter": {"metrics_url": scenario.exporter.url},
        "jobs": [
            {"name": scenario.query, "pid": os.getpid(), "metrics_url": scenario.job_metrics_url},
            {
                "name": "not-started",
                "pid": os.getpid(),
                "metrics_url": not_started,
            },
        ],
        "processes": [],
        "producers": [],
    }
    (tmp_path / "state.json").write_text(json.dumps(state))
    truth = ground_truth(kafka, scenario)
    _settled(scenario, truth)

    result = streamstack("status", "--workdir", str(tmp_path), "--json")
    finished = time.time()

    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    _check_rows(document["rows"], scenario, truth, finished)
    [unreachable] = document["unreachable_job_endpoints"]  # a job still starting is a note, not an error
    assert unreachable.startswith(f"{not_started}: unreachable")


def test_an_unreachable_exporter_is_a_one_line_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"

    result = streamstack("status", "--exporter-url", url)

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"streamstack: error: --exporter-url {url}: unreachable")


def test_an_url_serving_no_lag_metrics_is_a_one_line_error(job_metrics_url: str) -> None:
    result = streamstack("status", "--exporter-url", job_metrics_url)

    assert result.returncode == 1
    assert result.stderr == (
        f"streamstack: error: --exporter-url {job_metrics_url}: serves no streamstack_lag_* metrics\n"
    )


def test_an_unreachable_job_endpoint_given_on_the_command_line_is_an_error(scenario: Scenario) -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"

    result = streamstack("status", "--exporter-url", scenario.exporter.url, "--job-metrics-url", url)

    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"streamstack: error: --job-metrics-url {url}: unreachable")

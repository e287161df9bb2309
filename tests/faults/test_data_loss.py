"""Input lost under a job (failOnDataLoss): records deleted before the job read them, and an input topic
deleted under a running job. The job stops with one line naming topic, partition and offsets lost and how to
resume; the exporter counts the lost records and StreamstackConsumerDataLoss fires in a real Prometheus; the
runbook's resume (one run with --accept-data-loss) gives exactly the output of the records still kept.

Records are deleted with delete-records, which moves the partition's log start offset as retention does,
at a moment the test chooses."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, TopicPartition

from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.process import ManagedProcess
from streamstack.local.prometheus import LocalPrometheus
from streamstack.runtimes import Runtimes
from tests.faults.helpers import COUNTING_SETTINGS
from tests.jobs.streaming_helpers import start_window_job, views_per_key
from tests.jobs.test_exactly_once import BASE, expected_counts, produce_fast
from tests.kafka_helpers import metric_sum, read_records, scrape, wait_for
from tests.monitoring.exporter_process import running_exporter

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

JOB = "clickstream-windows"
PARTITIONS = 2
DELETED = 50  # records of partition 0 deleted past the job's checkpoint


def events(first: int, count: int) -> list[tuple[str, str, float]]:
    return [(f"user-{i % 40}", f"/p/{i % 7}", i / 10.0) for i in range(first, first + count)]


def as_event(value: bytes | None) -> tuple[str, str, float]:
    """A record read back as the (user, url, seconds after BASE) it was produced from."""
    assert value is not None
    event = json.loads(value)
    moment = datetime.fromisoformat(event["event_time"].replace("Z", "+00:00"))
    return event["user_id"], event["url"], round((moment - BASE).total_seconds(), 3)


def offsets_read(metrics_url: str) -> float:
    """The input offsets the main query's batches reached, summed over partitions."""
    return metric_sum(scrape(metrics_url), "streamstack_query_source_end_offset", query=JOB)


class WindowJob:
    """The window job on this test's topics and checkpoint, started and stopped as often as needed."""

    def __init__(self, runtimes: Runtimes, kafka: LocalKafka, tmp_path: Path, prefix: str) -> None:
        self.runtimes, self.kafka, self.tmp_path = runtimes, kafka, tmp_path
        self.topics = (f"{prefix}-page-views", f"{prefix}-per-url", f"{prefix}-dead-letters")
        self.checkpoint_root = tmp_path / "checkpoints"
        self.runs = 0
        kafka.create_topics(
            [
                TopicSpec(self.topics[0], partitions=PARTITIONS),
                TopicSpec(self.topics[1], partitions=PARTITIONS, compact=True),
                TopicSpec(self.topics[2], partitions=1),
            ]
        )

    def start(self, *flags: str) -> tuple[ManagedProcess, str]:
        self.runs += 1
        return start_window_job(
            self.runtimes,
            self.kafka.bootstrap_servers,
            checkpoint_dir=self.checkpoint_root,
            log_path=self.tmp_path / f"job-{self.runs}.log",
            topics=self.topics,
            settings=(*COUNTING_SETTINGS, *flags),
        )

    def run_until_read(self, end: int, *flags: str) -> None:
        """Start, wait until this run's batches of the main query reach `end` input offsets in all (summed
        over partitions), stop."""
        process, metrics_url = self.start(*flags)
        try:
            wait_for(
                lambda: (
                    process.is_running()
                    and metric_sum(scrape(metrics_url), "streamstack_query_source_end_offset", query=JOB)
                    >= end
                ),
                timeout=300,
                what=f"the job to read up to {end} input offsets ({process.log_path})",
            )
        finally:
            process.stop()

    def failure(self, process: ManagedProcess) -> str:
        """Wait for the job to stop on its own; its error line."""
        wait_for(lambda: not process.is_running(), timeout=300, what=f"the job to fail ({process.log_path})")
        process.stop()
        assert process.exit_code() not in (0, None)
        lines = [
            line for line in process.log_path.read_text().splitlines() if line.startswith(f"{JOB}: error:")
        ]
        assert len(lines) == 1, process.log_path
        return lines[0]


def query_committed(job: WindowJob, partition: int) -> int:
    """The next offset the main query reads in `partition`, from its newest offset-log entry."""
    offsets_dir = job.checkpoint_root / JOB / "offsets"
    newest = max(int(name) for name in (p.name for p in offsets_dir.iterdir()) if name.isdigit())
    entry = (offsets_dir / str(newest)).read_text().splitlines()[-1]
    return int(json.loads(entry)[job.topics[0]][str(partition)])


@pytest.fixture
def job(runtimes: Runtimes, kafka: LocalKafka, tmp_path: Path) -> WindowJob:
    return WindowJob(runtimes, kafka, tmp_path, f"loss-{uuid.uuid4().hex[:6]}")


@pytest.mark.timeout(900)
def test_records_deleted_before_the_job_read_them_stop_it_alert_and_resume_as_the_runbook_says(
    runtimes: Runtimes, kafka: LocalKafka, job: WindowJob, tmp_path: Path
) -> None:
    input_topic = job.topics[0]
    first_part, second_part = events(0, 400), events(400, 400)
    produce_fast(kafka.bootstrap_servers, input_topic, first_part)
    job.run_until_read(len(first_part))
    next_offset = query_committed(job, 0)

    produce_fast(kafka.bootstrap_servers, input_topic, second_part)
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    try:
        admin.delete_records({TopicPartition(input_topic, 0): next_offset + DELETED})
    finally:
        admin.close()
    kept = [as_event(record.value) for record in read_records(kafka.bootstrap_servers, input_topic)]

    exporter_flags = (
        f"--bootstrap-servers={kafka.bootstrap_servers}",
        f"--checkpoint-dir={JOB}={job.checkpoint_root / JOB}",
        "--no-groups",
        "--refresh-interval=1",
    )
    with running_exporter(exporter_flags, tmp_path / "exporter.log") as exporter:
        prometheus = LocalPrometheus(
            runtimes, tmp_path / "prometheus", {"lag-exporter": [exporter.url.split("/")[2]]}
        ).start()
        try:
            labels = {"group": JOB, "topic": input_topic, "partition": "0"}
            wait_for(
                lambda: metric_sum(scrape(exporter.url), "streamstack_lag_lost_records", **labels) == DELETED,
                timeout=60,
                what="the exporter to count the lost records",
            )
            assert metric_sum(scrape(exporter.url), "streamstack_lag_data_loss", **labels) == 1

            process, _ = job.start()
            error = job.failure(process)
            assert (
                f"topic {input_topic!r} partition 0: offsets {next_offset} to {next_offset + DELETED - 1}"
                in error
            )
            assert "--accept-data-loss" in error and "monitoring/rules/README.md#" in error
            assert "partition 1" not in error  # nothing of partition 1 is lost

            firing = 'ALERTS{alertname="StreamstackConsumerDataLoss", alertstate="firing"}'
            wait_for(lambda: bool(prometheus.query(firing)), timeout=180, what="the data-loss alert to fire")
            [alert] = prometheus.query(firing)
            assert (alert["metric"]["group"], alert["metric"]["topic"]) == (JOB, input_topic)

            # The runbook: once with --accept-data-loss until a batch commits, then as before.
            # Offsets, not records: the deleted records keep their offsets.
            job.run_until_read(len(first_part) + len(second_part), "--accept-data-loss")
            wait_for(
                lambda: metric_sum(scrape(exporter.url), "streamstack_lag_data_loss", **labels) == 0,
                timeout=60,
                what="the exporter to see the job past the lost range",
            )
        finally:
            prometheus.stop()

    last_part = events(800, 40)
    produce_fast(kafka.bootstrap_servers, input_topic, last_part)
    job.run_until_read(len(first_part) + len(second_part) + len(last_part))

    # Every event is distinct: the job read all of the first part before the deletion, then what was kept.
    read = {*first_part, *kept, *last_part}
    assert len(read) == len(first_part) + len(second_part) + len(last_part) - DELETED
    assert views_per_key(kafka.bootstrap_servers, job.topics[1]) == expected_counts(sorted(read))


@pytest.mark.timeout(600)
def test_an_input_topic_deleted_under_a_running_job_stops_it_naming_the_topic(
    kafka: LocalKafka, job: WindowJob
) -> None:
    input_topic = job.topics[0]
    produce_fast(kafka.bootstrap_servers, input_topic, events(0, 200))
    process, metrics_url = job.start()
    try:
        wait_for(
            lambda: offsets_read(metrics_url) >= 200,
            timeout=300,
            what=f"the job to read the input ({process.log_path})",
        )
        committed = {partition: query_committed(job, partition) for partition in range(PARTITIONS)}
        admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
        try:
            admin.delete_topics([input_topic])
        finally:
            admin.close()
        deleted_at = time.monotonic()
        error = job.failure(process)
    finally:
        process.stop()
    print(f"the job stopped {time.monotonic() - deleted_at:.1f} s after its input topic was deleted")
    for partition, offset in committed.items():
        assert f"topic {input_topic!r} was deleted: partition {partition} from offset {offset}" in error
    assert "--accept-data-loss" in error

    restarted, _ = job.start()
    wait_for(lambda: not restarted.is_running(), timeout=120, what="the restarted job to refuse to start")
    restarted.stop()
    assert restarted.exit_code() == 2
    assert f"topic does not exist: --input-topic {input_topic!r}" in restarted.log_path.read_text()

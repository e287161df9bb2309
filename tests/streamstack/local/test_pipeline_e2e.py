"""The vertical slice on real components: Kafka -> the window job (a child process, as deployed) -> Kafka,
with its progress scraped by a real Prometheus."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.process import ManagedProcess
from streamstack.local.prometheus import LocalPrometheus
from streamstack.runtimes import Runtimes
from tests.jobs.streaming_helpers import start_window_job, views_per_key
from tests.kafka_helpers import metric_sum, produce, read_dead_letters, scrape, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

WINDOW_SECONDS = 10
WATERMARK_SECONDS = 5
# Event times near now: the jobs dead-letter events more than 7 days from their Kafka timestamp.
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=5)
URLS = ("/home", "/cart", "/checkout")


@dataclass(frozen=True)
class View:
    user_id: str
    url: str
    seconds_after_base: float

    def encoded(self) -> tuple[bytes, bytes]:
        stamp = (BASE + timedelta(seconds=self.seconds_after_base)).strftime("%Y-%m-%dT%H:%M:%S.%f")[
            :-3
        ] + "Z"
        body = {"user_id": self.user_id, "url": self.url, "event_time": stamp}
        return self.user_id.encode(), json.dumps(body).encode()


def first_phase() -> list[View]:
    """Two minutes of views, sent out of event-time order: each run of five is reversed."""
    in_order = [View(f"user-{i % 7}", URLS[i % 3], i * 0.4) for i in range(300)]
    shuffled: list[View] = []
    for start in range(0, len(in_order), 5):
        shuffled.extend(reversed(in_order[start : start + 5]))
    return shuffled


def second_phase() -> list[View]:
    """Sent once the first phase is processed: out of order but on time, and one straggler."""
    return [
        View("user-1", "/home", 117.0),  # window [110, 120) is still open: counted
        View("user-2", "/cart", 111.5),  # counted
        View("user-3", "/checkout", 12.0),  # window [10, 20) closed long ago: dropped by the watermark
        View("user-4", "/home", 119.9),  # counted
    ]


def expected_counts(first: list[View], second: list[View]) -> dict[str, int]:
    """Reference: count per (window, url); a row is dropped when its window ended at or before the
    watermark, which for the second phase is the first phase's max event time less the delay."""
    watermark = max(view.seconds_after_base for view in first) - WATERMARK_SECONDS
    counts: Counter[str] = Counter()
    for phase, views in (("first", first), ("second", second)):
        for view in views:
            window_start = int(view.seconds_after_base // WINDOW_SECONDS) * WINDOW_SECONDS
            if phase == "second" and window_start + WINDOW_SECONDS <= watermark:
                continue
            start = (BASE + timedelta(seconds=window_start)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            counts[f"{start}|{view.url}"] += 1
    return dict(counts)


# Malformed input sent along with the first phase, and the dead-letter reason each must get.
BAD_RECORDS: list[tuple[bytes, str]] = [
    (b'{"user_id": "user-1", "url": "/home"', "malformed_json"),
    (b"\xc3\x28 not utf-8", "not_utf8"),
    (
        json.dumps({"user_id": "user-1", "url": 7, "event_time": "2026-01-01T00:00:00Z"}).encode(),
        "wrong_type",
    ),
    (json.dumps({"user_id": "user-1", "event_time": "2026-01-01T00:00:00Z"}).encode(), "missing_field"),
    (
        json.dumps({"user_id": "u", "url": "/", "event_time": "2999-01-01T00:00:00Z"}).encode(),
        "event_time_out_of_range",
    ),
    (
        json.dumps({"user_id": "u", "url": "/" * 70_000, "event_time": "2026-01-01T00:00:00Z"}).encode(),
        "oversized",
    ),
]


@dataclass
class RunningJob:
    process: ManagedProcess
    metrics_url: str
    input_topic: str
    output_topic: str
    dead_letter_topic: str


@pytest.fixture(scope="module")
def windows_job(
    runtimes: Runtimes, kafka: LocalKafka, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningJob]:
    workdir: Path = tmp_path_factory.mktemp("windows-job")
    input_topic, output_topic = "e2e-page-views", "e2e-page-views-per-url"
    kafka.create_topics(
        [
            TopicSpec(input_topic, partitions=3),
            TopicSpec(output_topic, partitions=3, compact=True),
            TopicSpec(f"{input_topic}.dead-letters", partitions=1),
            TopicSpec("e2e-page-view-windows", partitions=3, compact=True),
            TopicSpec("e2e-page-views-late", partitions=1),
        ]
    )
    produce(kafka.bootstrap_servers, input_topic, (view.encoded() for view in first_phase()))
    produce(kafka.bootstrap_servers, input_topic, ((b"bad", value) for value, _ in BAD_RECORDS))
    process, metrics_url = start_window_job(
        runtimes,
        kafka.bootstrap_servers,
        checkpoint_dir=workdir / "checkpoint",
        log_path=workdir / "job.log",
        topics=(input_topic, output_topic, f"{input_topic}.dead-letters"),
        settings=(
            "--windows-topic",
            "e2e-page-view-windows",
            "--late-topic",
            "e2e-page-views-late",
            "--window-duration",
            f"{WINDOW_SECONDS} seconds",
            "--watermark-delay",
            f"{WATERMARK_SECONDS} seconds",
            "--shuffle-partitions",
            "2",
        ),
    )
    try:
        yield RunningJob(process, metrics_url, input_topic, output_topic, f"{input_topic}.dead-letters")
    finally:
        process.stop()


def processed_offsets(job: RunningJob) -> float:
    samples = scrape(job.metrics_url)
    return metric_sum(samples, "streamstack_query_source_end_offset", query="clickstream-windows")


def test_window_counts_read_back_from_kafka_are_exact(windows_job: RunningJob, kafka: LocalKafka) -> None:
    first, second = first_phase(), second_phase()
    wait_for(
        lambda: processed_offsets(windows_job) == len(first) + len(BAD_RECORDS),
        timeout=180,
        what=f"the job to process the first {len(first)} events (log {windows_job.process.log_path})",
    )
    produce(kafka.bootstrap_servers, windows_job.input_topic, (view.encoded() for view in second))
    wait_for(
        lambda: processed_offsets(windows_job) == len(first) + len(BAD_RECORDS) + len(second),
        timeout=60,
        what="the job to process the second phase",
    )

    latest_per_key = views_per_key(kafka.bootstrap_servers, windows_job.output_topic)

    assert latest_per_key == expected_counts(first, second)
    metrics = scrape(windows_job.metrics_url)
    assert metrics['streamstack_query_rows_dropped_by_watermark_total{query="clickstream-windows"}'] == 1
    read_rows = metrics['streamstack_query_input_rows_total{query="clickstream-windows"}']
    assert read_rows == len(first) + len(BAD_RECORDS) + len(second)
    assert metrics['streamstack_query_active{query="clickstream-windows"}'] == 1


def test_malformed_records_go_to_the_dead_letter_topic_and_are_counted(
    windows_job: RunningJob, kafka: LocalKafka
) -> None:
    def dead_letters() -> list[tuple[bytes | None, str]]:
        letters = read_dead_letters(kafka.bootstrap_servers, windows_job.dead_letter_topic)
        return [(letter.value, letter.reason) for letter in letters]

    wait_for(lambda: len(dead_letters()) >= len(BAD_RECORDS), 120, "the dead letters")

    assert sorted(dead_letters()) == sorted(BAD_RECORDS)
    samples = scrape(windows_job.metrics_url)
    query = "clickstream-windows.dead-letters"
    for _, reason in BAD_RECORDS:
        counted = metric_sum(samples, "streamstack_query_dead_letters_total", query=query, reason=reason)
        assert counted == sum(1 for _, expected in BAD_RECORDS if expected == reason)


def test_processed_offsets_are_committed_to_the_shadow_group(
    windows_job: RunningJob, kafka: LocalKafka
) -> None:
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers)
    try:
        partitions = [TopicPartition(windows_job.input_topic, p) for p in range(3)]
        topic_end_offsets = consumer.end_offsets(partitions)
    finally:
        consumer.close()
    wait_for(
        lambda: processed_offsets(windows_job) == sum(topic_end_offsets.values()), 120, "the job to catch up"
    )

    def shadow_offsets() -> dict[TopicPartition, int]:
        admin = kafka.admin()
        try:
            committed = admin.list_group_offsets({"streamstack-clickstream-windows": None})
        finally:
            admin.close()
        # The session's broker is shared: other tests' runs of this job commit their own topics to the group.
        return {
            tp: meta.offset
            for tp, meta in committed["streamstack-clickstream-windows"].items()
            if tp.topic == windows_job.input_topic
        }

    wait_for(lambda: shadow_offsets() == topic_end_offsets, 30, "the shadow group to reach the topic's end")


def test_prometheus_scrapes_the_job_progress(
    windows_job: RunningJob, runtimes: Runtimes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    target = windows_job.metrics_url.removeprefix("http://").removesuffix("/metrics")
    wait_for(lambda: processed_offsets(windows_job) > 0, timeout=180, what="the job's first batch")
    prometheus = LocalPrometheus(
        runtimes, tmp_path_factory.mktemp("prometheus"), {"streaming-jobs": [target]}, scrape_interval="1s"
    ).start()
    try:
        wait_for(
            lambda: any(sample["value"][1] == "1" for sample in prometheus.query('up{job="streaming-jobs"}')),
            timeout=30,
            what="Prometheus to scrape the job",
        )
        wait_for(
            lambda: bool(
                prometheus.query('streamstack_query_input_rows_total{query="clickstream-windows"} > 0')
            ),
            timeout=30,
            what="the job's input rows in Prometheus",
        )
        for metric in (
            "streamstack_query_processed_rows_per_second",
            "streamstack_query_input_rows_per_second",
            "streamstack_query_batch_duration_seconds",
            "streamstack_query_offsets_behind_latest",
        ):
            [series] = prometheus.query(f'{metric}{{query="clickstream-windows"}}')
            assert series["metric"]["job"] == "streaming-jobs"
            assert float(series["value"][1]) >= 0
    finally:
        prometheus.stop()

"""A running Spark job seen by the lag exporter two ways: through its shadow group and through its checkpoint.

The window job runs as a child process (as `streamstack local up` runs it). Once its first batch is done, a
producer sends faster than maxOffsetsPerTrigger lets it read, so it falls behind, and catches up once the
producer stops. The exporter's refresh loop is stepped by the test every half second. Both sources must only
ever report positions that are the end offsets of a batch the checkpoint committed, stay within two batches
of each other (the shadow commit follows the batch's commit asynchronously, and the exporter reads the
checkpoint just before the groups), and both reach lag 0 at the topic's end offsets. The offset log this
Spark writes is checked to be the `v1` format the exporter reads.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka import KafkaProducer
from prometheus_client import CollectorRegistry

from monitoring.lag_exporter.collector import ExporterHealth, LagCollector
from monitoring.lag_exporter.config import CheckpointDir, ExporterConfig, NameFilter
from monitoring.lag_exporter.kafka_reader import KafkaReader
from monitoring.lag_exporter.loop import Refresher
from monitoring.lag_exporter.sources import parse_offsets_file
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.runtimes import Runtimes
from tests.jobs.streaming_helpers import iso, start_window_job
from tests.kafka_helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

QUERY = "clickstream-windows"
SHADOW_GROUP = f"streamstack-{QUERY}"
PARTITIONS = 2
EVENTS, EVENTS_PER_SECOND, MAX_OFFSETS_PER_TRIGGER = 240, 40, 20

Offsets = tuple[int, ...]  # committed offset per partition


@dataclass(frozen=True)
class Observation:
    shadow: Offsets | None
    checkpoint: Offsets | None
    shadow_lag: float | None
    checkpoint_lag: float | None


def produce(bootstrap_servers: str, topic: str, events: int, done: threading.Event | None = None) -> None:
    """`events` page views, alternating partitions, EVENTS_PER_SECOND; sets `done` when they are written."""
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", linger_ms=5)
    try:
        for index in range(events):
            user = f"user-{index % 7}"
            body = {"user_id": user, "url": f"/page/{index % 3}", "event_time": iso(datetime.now(UTC))}
            producer.send(
                topic, key=user.encode(), value=json.dumps(body).encode(), partition=index % PARTITIONS
            )
            time.sleep(1 / EVENTS_PER_SECOND)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
        if done is not None:
            done.set()


def committed_batches(checkpoint: Path, topic: str) -> dict[Offsets, set[int]]:
    """{end offsets of the topic's partitions: ids of the committed batches that ended there}, read from
    offsets/<id> for each commits/<id> (a batch that only moves the watermark repeats the offsets before)."""
    batches: dict[Offsets, set[int]] = {}
    for entry in (checkpoint / "commits").iterdir():
        if entry.name.isdigit():
            offsets = parse_offsets_file((checkpoint / "offsets" / entry.name).read_text())
            batches.setdefault(tuple(offsets[(topic, p)] for p in range(PARTITIONS)), set()).add(
                int(entry.name)
            )
    return batches


def batch_distance(batches: dict[Offsets, set[int]], one: Offsets, other: Offsets) -> int:
    return min(abs(a - b) for a in batches[one] for b in batches[other])


def test_shadow_group_and_checkpoint_agree_and_both_return_to_zero(
    runtimes: Runtimes, kafka: LocalKafka, tmp_path: Path
) -> None:
    topic = f"lag-sources-{time.monotonic_ns()}"
    kafka.create_topics(
        [
            TopicSpec(topic, partitions=PARTITIONS),
            TopicSpec(f"{topic}-per-url", partitions=1, compact=True),
            TopicSpec(f"{topic}.dead-letters"),
        ]
    )
    root = tmp_path / "checkpoints"
    job, _metrics_url = start_window_job(
        runtimes,
        kafka.bootstrap_servers,
        checkpoint_dir=root,
        log_path=tmp_path / "job.log",
        topics=(topic, f"{topic}-per-url", f"{topic}.dead-letters"),
        settings=(
            "--max-offsets-per-trigger",
            str(MAX_OFFSETS_PER_TRIGGER),
            "--shuffle-partitions",
            "1",
        ),
    )
    config = ExporterConfig(
        bootstrap_servers=kafka.bootstrap_servers,
        refresh_interval=0.5,
        window=5.0,
        groups=NameFilter.of([SHADOW_GROUP]),
        topics=NameFilter.of([topic]),
        checkpoints=(CheckpointDir("ck", root),),
    )
    registry = CollectorRegistry()
    reader = KafkaReader(config)
    refresher = Refresher(config, reader, ExporterHealth(registry))
    registry.register(LagCollector(refresher.latest))
    sources = {"shadow": SHADOW_GROUP, "checkpoint": f"ck/{QUERY}"}

    def observe() -> Observation:
        assert refresher.refresh(), "the exporter could not read Kafka"
        positions: dict[str, Offsets | None] = {}
        lags: dict[str, float | None] = {}
        for source, group in sources.items():
            committed = [
                registry.get_sample_value(
                    "streamstack_lag_committed_offset",
                    {"source": source, "group": group, "topic": topic, "partition": str(p)},
                )
                for p in range(PARTITIONS)
            ]
            known = all(value is not None for value in committed)
            positions[source] = tuple(int(value or 0) for value in committed) if known else None
            lags[source] = registry.get_sample_value(
                "streamstack_lag_group_records", {"source": source, "group": group}
            )
        return Observation(positions["shadow"], positions["checkpoint"], lags["shadow"], lags["checkpoint"])

    produced = threading.Event()
    producer = threading.Thread(target=produce, args=(kafka.bootstrap_servers, topic, EVENTS, produced))
    observations: list[Observation] = []
    try:
        produce(kafka.bootstrap_servers, topic, PARTITIONS)  # one view per partition: the first batch
        wait_for(
            lambda: observe().checkpoint == (1,) * PARTITIONS,
            timeout=150,
            what=f"the job's first batch ({job.log_path})",
            interval=1.0,
        )
        producer.start()  # into the running query
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            observation = observe()
            observations.append(observation)
            if produced.is_set() and observation.shadow_lag == 0 and observation.checkpoint_lag == 0:
                break
            assert job.is_running(), f"the job exited: {job.log_path}"
            time.sleep(0.5)
        else:
            raise AssertionError(
                f"lag did not return to 0 on both sources: {observations[-3:]} ({job.log_path})"
            )
        producer.join(timeout=30)
        batches = committed_batches(root / QUERY, topic)
        offset_log_versions = {
            path.read_text().split("\n", 1)[0]
            for query in root.iterdir()
            for path in (query / "offsets").iterdir()
            if path.name.isdigit()
        }
    finally:
        job.stop()
        reader.close()
        producer.join(timeout=60)

    final = observations[-1]
    assert final.shadow == final.checkpoint == (1 + EVENTS // PARTITIONS,) * PARTITIONS  # the topic's end
    # The job fell behind while the producer sent: both sources showed it at the same time.
    assert any((o.shadow_lag or 0) > 0 and (o.checkpoint_lag or 0) > 0 for o in observations), observations
    seen = [o for o in observations if o.shadow is not None and o.checkpoint is not None]
    assert len(seen) >= 5, observations
    for observation in seen:  # each source reports a position Spark committed, the two close together
        assert observation.shadow in batches and observation.checkpoint in batches, (observation, batches)
        distance = batch_distance(batches, observation.shadow, observation.checkpoint)
        assert distance <= 2, (observation, batches)
        lag_difference = abs((observation.shadow_lag or 0) - (observation.checkpoint_lag or 0))
        assert lag_difference <= 2 * MAX_OFFSETS_PER_TRIGGER, observation
    assert offset_log_versions == {"v1"}  # what Spark 4.3 writes by default, and what the exporter reads

"""Test-side Kafka and metrics helpers: produce known events, read topics back, poll a job's metrics."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import KafkaError
from prometheus_client.parser import text_string_to_metric_families

from streamstack.local.kafka import LocalKafka

Record = tuple[bytes | None, bytes | None]
"""(key, value) to produce; a None value is a tombstone."""

# Topic settings under which `compact_snapshots` can get the log cleaner to run within the test.
FAST_COMPACTION = {"segment.ms": "100", "min.cleanable.dirty.ratio": "0.001"}


@dataclass(frozen=True)
class TopicRecord:
    """A record and where it is in its topic: as produced (no headers) or as read back."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def position(self) -> str:
        """`<topic>/<partition>/<offset>`, as the jobs key the dead letter of a bad record."""
        return f"{self.topic}/{self.partition}/{self.offset}"


@dataclass(frozen=True)
class DeadLetter:
    """A record of a dead-letter topic: the bad record's raw value, its origin and the reason."""

    key: bytes | None
    value: bytes | None
    reason: str  # the `dead_letter.reason` header
    source_topic: str | None  # the `source.topic` header

    @property
    def origin(self) -> str:
        """The bad record's position, `<topic>/<partition>/<offset>`: the dead letter's key."""
        assert self.key is not None, f"a dead letter without a key: {self}"
        return self.key.decode()


def produce(bootstrap_servers: str, topic: str, records: Iterable[Record]) -> list[TopicRecord]:
    """Produce in order (a keyed record lands in its key's partition) and return where each landed."""
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all")
    try:
        futures = [(key, value, producer.send(topic, key=key, value=value)) for key, value in records]
        producer.flush(timeout=30)
        placed = []
        for key, value, future in futures:
            metadata = future.get(timeout=30)
            placed.append(TopicRecord(topic, metadata.partition, metadata.offset, key, value))
        return placed
    finally:
        producer.close(timeout=10)


def read_records(bootstrap_servers: str, topic: str) -> list[TopicRecord]:
    """Every record of the topic with its partition, offset and headers, from the beginning up to the end
    offsets as of now."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        end_offsets = consumer.end_offsets(partitions)
        records: list[TopicRecord] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < end_offsets[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end offsets {end_offsets}")
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(
                    TopicRecord(r.topic, r.partition, r.offset, r.key, r.value, tuple(r.headers))
                    for r in batch
                )
        return records
    finally:
        consumer.close()


def read_all(bootstrap_servers: str, topic: str) -> list[Record]:
    """Every record of the topic as (key, value), from the beginning up to the end offsets as of now."""
    return [(record.key, record.value) for record in read_records(bootstrap_servers, topic)]


def latest_per_key(records: Iterable[TopicRecord], *, tombstones: bool = False) -> dict[str, Any]:
    """The last value per key, decoded from JSON, in the order read (a key's records share a partition).
    Every record must have a key; with `tombstones` a key whose last record is one maps to None, without
    them a tombstone fails."""
    latest: dict[str, Any] = {}
    for record in records:
        assert record.key is not None, f"a record without a key at {record.position}"
        assert tombstones or record.value is not None, f"a tombstone at {record.position}"
        latest[record.key.decode()] = None if record.value is None else json.loads(record.value)
    return latest


def count_and_latest(bootstrap_servers: str, topic: str) -> tuple[int, dict[str, Any]]:
    """(records in the topic, latest JSON value per key), for an output that must hold no tombstone."""
    records = read_records(bootstrap_servers, topic)
    return len(records), latest_per_key(records)


def read_dead_letters(bootstrap_servers: str, topic: str) -> list[DeadLetter]:
    """Every record of a dead-letter topic with its reason and source topic headers."""
    letters = []
    for record in read_records(bootstrap_servers, topic):
        headers = dict(record.headers)
        source_topic = headers.get("source.topic")
        letters.append(
            DeadLetter(
                record.key,
                record.value,
                headers["dead_letter.reason"].decode(),
                None if source_topic is None else source_topic.decode(),
            )
        )
    return letters


def compact_snapshots(kafka: LocalKafka, snapshots: Mapping[str, Sequence[Record]]) -> list[TopicRecord]:
    """Produce each snapshot into its topic (created with FAST_COMPACTION), roll every partition's segment by
    re-sending its last record, wait until the log cleaner has kept only the last record per key in the
    rolled segments, then stop rolling so the cleaner leaves the rest of the test alone. Returns every
    record sent, each topic's in the order sent."""
    bootstrap = kafka.bootstrap_servers
    sent = {topic: produce(bootstrap, topic, records) for topic, records in snapshots.items()}
    time.sleep(0.3)  # past segment.ms, so the next append to each partition rolls its segment
    surviving: dict[str, int] = {}
    for topic, records in sent.items():
        last_per_partition = {record.partition: record for record in records}
        surviving[topic] = len({(r.partition, r.key) for r in records}) + len(last_per_partition)
        records.extend(produce(bootstrap, topic, [(r.key, r.value) for r in last_per_partition.values()]))
    wait_for(
        lambda: all(len(read_records(bootstrap, topic)) == count for topic, count in surviving.items()),
        timeout=40,
        what=f"the log cleaner to compact {', '.join(surviving)}",
    )
    admin = kafka.admin()
    try:
        admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC,
                    topic,
                    configs={"cleanup.policy": "compact", "segment.ms": str(7 * 24 * 3600 * 1000)},
                )
                for topic in snapshots
            ]
        )
    finally:
        admin.close()
    return [record for records in sent.values() for record in records]


def scrape(metrics_url: str) -> dict[str, float]:
    """Samples of an endpoint as {'name{label="v",...}': value}, plus a sum per metric name."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{key}="{value}"' for key, value in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
            samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
    return samples


def group_offsets(kafka: LocalKafka, group: str) -> dict[int, int]:
    """A consumer group's committed offset per partition; empty until its first commit has landed (no
    coordinator for the group before that)."""
    admin = kafka.admin()
    try:
        offsets = admin.list_group_offsets({group: None})[group]
    except KafkaError:
        return {}
    finally:
        admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if isinstance(tp, TopicPartition)}


def wait_for(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def metric_sum(samples: dict[str, float], name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include all of `labels` (from `scrape`)."""
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    total = 0.0
    for key, value in samples.items():
        metric, _, label_text = key.partition("{")
        if (
            metric == name
            and label_text
            and all(item in label_text.rstrip("}").split(",") for item in wanted)
        ):
            total += value
    return total

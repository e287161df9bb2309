"""The benchmark's load on a local broker: topics of 10 partitions, records, groups and their commits."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, Producer  # type: ignore[import-untyped]
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import CoordinatorLoadInProgressError, CoordinatorNotAvailableError, NotCoordinatorError
from kafka.protocol.consumer import OffsetSpec
from kafka.protocol.metadata import MetadataRequest
from kafka.structs import OffsetAndMetadata

PARTITIONS_PER_TOPIC = 10


READERS_PER_TOPIC = 3


def topic_name(index: int) -> str:
    return f"bench-t{index:04d}"


def group_topics(partitions: int, groups: int, group: int) -> list[int]:
    """Indexes of the topics group `group` of `groups` reads (see the module docstring)."""
    topics = partitions // PARTITIONS_PER_TOPIC
    share = min(topics, max(1, math.ceil(READERS_PER_TOPIC * topics / groups)))
    first = group * topics // groups
    return [(first + i) % topics for i in range(share)]


def group_id(partitions: int, groups: int, group: int) -> str:
    return f"bench-p{partitions}-g{groups}-{group:03d}"


def records_in(topic: int, partition: int) -> int:
    return 5 + (topic * 31 + partition * 17) % 36


def committed_offset(group: int, topic: int, partition: int, end: int) -> int:
    """A quarter of the partitions caught up; the others 0/8 to 7/8 of the way to the end."""
    step = (group * 7 + topic * 13 + partition * 3) % 12
    return end if step < 3 else end * (step - 3) // 8


@dataclass(frozen=True)
class Size:
    partitions: int
    groups: int

    @property
    def group_filter(self) -> str:
        return f"bench-p{self.partitions}-g{self.groups}-.*"

    def assignment(self) -> dict[str, list[int]]:
        return {
            group_id(self.partitions, self.groups, g): group_topics(self.partitions, self.groups, g)
            for g in range(self.groups)
        }

    def series(self) -> int:
        return sum(len(topics) for topics in self.assignment().values()) * PARTITIONS_PER_TOPIC


CREATE_BATCH = 100


def create_topics(admin: KafkaAdminClient, first: int, count: int, timeout: float = 900) -> None:
    """Topics bench-t<first>..bench-t<first+count-1>, CREATE_BATCH per request; waits until every broker
    knows every partition's leader. The controller answers for the leaders long before the other brokers
    have applied thousands of new topics to their metadata: a producer asking them then gets
    UNKNOWN_TOPIC_OR_PARTITION (records to 1,000 new topics failed that way on a cluster of three)."""
    names = [topic_name(index) for index in range(first, first + count)]
    for start in range(0, len(names), CREATE_BATCH):
        batch = [NewTopic(name, PARTITIONS_PER_TOPIC, 1) for name in names[start : start + CREATE_BATCH]]
        admin.create_topics(batch, timeout_ms=120_000)
    nodes = sorted(broker["broker_id"] for broker in admin.describe_cluster()["brokers"])
    deadline = time.monotonic() + timeout
    waiting = names
    while True:
        waiting = [
            name
            for start in range(0, len(waiting), 10 * CREATE_BATCH)
            for name in _without_leaders(admin, nodes, waiting[start : start + 10 * CREATE_BATCH])
        ]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(waiting)} of {len(names)} topics have no leaders after {timeout:.0f} s")
        time.sleep(1)


def _without_leaders(admin: KafkaAdminClient, nodes: list[int], names: list[str]) -> list[str]:
    """Those of `names` that some broker of `nodes` does not know with a leader for each partition."""
    everywhere = set(names)
    for node in nodes:
        everywhere &= {
            topic["name"]
            for topic in admin._manager.run(_metadata_of, admin, node, names)["topics"]
            if topic.get("error_code", 0) == 0
            and len(topic["partitions"]) == PARTITIONS_PER_TOPIC
            and all(partition["leader_id"] >= 0 for partition in topic["partitions"])
        }
    return [name for name in names if name not in everywhere]


async def _metadata_of(admin: KafkaAdminClient, node: int, names: list[str]) -> dict[str, Any]:
    """What broker `node` answers to a Metadata request for `names` (kafka-python has no public call that
    picks the broker; this is what its describe_topics does, sent to one node)."""
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=name) for name in names],
        allow_auto_topic_creation=False,
    )
    response = await admin._manager.send(request, node_id=node)
    answer: dict[str, Any] = response.to_dict()
    return answer


def record_timestamps(topic: int, partition: int, now_ms: int) -> list[int]:
    """Create-time stamps of the records of a partition: 1 to 10 s apart, the last one a spacing ago."""
    total = records_in(topic, partition)
    spacing_ms = 1000 * (1 + (topic + partition) % 10)
    return [now_ms - (total - i) * spacing_ms for i in range(total)]


def fill_topics(bootstrap: str, first: int, count: int) -> int:
    """records_in(t, p) records of ~100 bytes into every partition, create-time stamps up to minutes old.

    With librdkafka (confluent-kafka): batches across thousands of partitions, retries what a broker
    refuses for a while, and reports each record's delivery; a record not delivered fails the benchmark.
    """
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failed.append(error)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 50,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
            "message.timeout.ms": 600_000,
        }
    )
    now_ms = int(time.time() * 1000)
    value = b"x" * 100
    sent = 0
    for topic in range(first, first + count):
        name = topic_name(topic)
        for partition in range(PARTITIONS_PER_TOPIC):
            for timestamp in record_timestamps(topic, partition, now_ms):
                while True:
                    try:
                        producer.produce(
                            name, value, partition=partition, timestamp=timestamp, on_delivery=delivered
                        )
                        break
                    except BufferError:  # the local queue is full: let deliveries drain it
                        producer.poll(0.1)
                sent += 1
        producer.poll(0)
    if producer.flush(600) or failed:
        raise RuntimeError(f"producing failed: {len(failed)} records not delivered (first: {failed[:1]})")
    return sent


def end_offsets(admin: KafkaAdminClient, topics: int) -> dict[tuple[int, int], int]:
    specs = {
        TopicPartition(topic_name(t), p): OffsetSpec.LATEST
        for t in range(topics)
        for p in range(PARTITIONS_PER_TOPIC)
    }
    answer = admin.list_partition_offsets(specs, timeout_ms=120_000)
    return {
        (int(tp.topic.rsplit("t", 1)[1]), tp.partition): int(value.offset) for tp, value in answer.items()
    }


def _retry(call: Callable[[], Any], what: str, timeout: float = 120) -> Any:
    """`call()`, retried while the group coordinator is not there yet (`__consumer_offsets` is created on
    the first group request)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except (CoordinatorNotAvailableError, NotCoordinatorError, CoordinatorLoadInProgressError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: no group coordinator after {timeout:.0f} s") from None
            time.sleep(0.5)


def commit_groups(
    admin: KafkaAdminClient, size: Size, ends: dict[tuple[int, int], int], timeout: float = 120
) -> None:
    """Each group's offsets committed; partitions answered with a retriable error (a coordinator still
    loading `__consumer_offsets`, or not yet knowing a topic just created) are committed again, for up to
    `timeout` seconds a group."""
    for g, (group, topics) in enumerate(size.assignment().items()):
        offsets = {
            TopicPartition(topic_name(t), p): OffsetAndMetadata(
                committed_offset(g, t, p, ends[(t, p)]), "", -1
            )
            for t in topics
            for p in range(PARTITIONS_PER_TOPIC)
        }
        what = f"committing offsets of {group}"
        deadline = time.monotonic() + timeout
        while True:
            errors = _retry(partial(admin.alter_group_offsets, group, offsets), what, timeout)
            failed = {tp: error for tp, error in errors.items() if error is not None and error.errno != 0}
            if not failed:
                break
            if time.monotonic() > deadline or not all(error.retriable for error in failed.values()):
                names = ", ".join(sorted({error.__name__ for error in failed.values()}))
                raise RuntimeError(f"{what} failed for {len(failed)} partitions: {names}")
            offsets = {tp: offsets[tp] for tp in failed}
            time.sleep(0.5)

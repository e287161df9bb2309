"""The benchmark's load on a local broker: topics of 10 partitions, records, groups and their commits."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import CoordinatorLoadInProgressError, CoordinatorNotAvailableError, NotCoordinatorError
from kafka.protocol.consumer import OffsetSpec
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


def create_topics(admin: KafkaAdminClient, first: int, count: int) -> None:
    """Topics bench-t<first>..bench-t<first+count-1>, 100 per request; waits until all have leaders."""
    names = [topic_name(index) for index in range(first, first + count)]
    for start in range(0, len(names), 100):
        batch = [NewTopic(name, PARTITIONS_PER_TOPIC, 1) for name in names[start : start + 100]]
        admin.create_topics(batch, timeout_ms=120_000)
    deadline = time.monotonic() + 300
    while True:
        described = admin.describe_topics(names)
        led = sum(
            1
            for topic in described
            if topic.get("error_code", 0) == 0
            and len(topic["partitions"]) == PARTITIONS_PER_TOPIC
            and all(partition["leader_id"] >= 0 for partition in topic["partitions"])
        )
        if led == len(names):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {led} of {len(names)} topics have leaders after 300 s")
        time.sleep(1)


def fill_topics(bootstrap: str, first: int, count: int) -> int:
    """records_in(t, p) records of ~100 bytes into every partition, create-time stamps up to minutes old."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=16 * 1024)
    # The first send to a topic waits ~100 ms for its metadata: ask for all topics at once, concurrently.
    with ThreadPoolExecutor(64) as pool:
        list(pool.map(producer.partitions_for, [topic_name(t) for t in range(first, first + count)]))
    now_ms = int(time.time() * 1000)
    value = b"x" * 100
    sent = 0
    for topic in range(first, first + count):
        name = topic_name(topic)
        for partition in range(PARTITIONS_PER_TOPIC):
            total = records_in(topic, partition)
            spacing_ms = 1000 * (1 + (topic + partition) % 10)
            for i in range(total):
                producer.send(
                    name, value=value, partition=partition, timestamp_ms=now_ms - (total - i) * spacing_ms
                )
            sent += total
    producer.flush(timeout=600)
    producer.close()
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


def commit_groups(admin: KafkaAdminClient, size: Size, ends: dict[tuple[int, int], int]) -> None:
    for g, (group, topics) in enumerate(size.assignment().items()):
        offsets = {
            TopicPartition(topic_name(t), p): OffsetAndMetadata(
                committed_offset(g, t, p, ends[(t, p)]), "", -1
            )
            for t in topics
            for p in range(PARTITIONS_PER_TOPIC)
        }
        errors = _retry(partial(admin.alter_group_offsets, group, offsets), f"committing offsets of {group}")
        failed = [tp for tp, error in errors.items() if error is not None and error.errno != 0]
        if failed:
            raise RuntimeError(f"committing offsets of {group} failed for {len(failed)} partitions")

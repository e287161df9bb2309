"""The Python peers: a plain confluent-kafka + orjson consumer and Quix Streams, on the benchmark topic.

Both apply `records.classify` to every record and count valid views per (10 s window, url); both run in
this process, so their CPU is this process's (every thread: librdkafka's too), from `os.times()`, the
same user + system time as /proc/<pid>/stat. The clock and the CPU count start at the first record
received and stop when the last one has been counted (connecting and the group join are left out).
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (  # type: ignore[import-untyped]
    OFFSET_BEGINNING,
    Consumer,
    Producer,
    TopicPartition,
)

from scripts.bench_windows.records import PARTITIONS, QUIX_GRACE_MS, WINDOW_MS, Counts, classify, window_start


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


@dataclass
class PeerRun:
    """One pass of a peer over the topic."""

    records: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    counts: Counts = field(default_factory=Counter)
    dead_letters: Counter[str] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "seconds": round(self.seconds, 4),
            "cpu_seconds": round(self.cpu_seconds, 4),
            "events_per_second": round(self.records / self.seconds, 1),
            "busy_cores": round(self.cpu_seconds / self.seconds, 3),
            "dead_letters": dict(sorted(self.dead_letters.items())),
        }


def topic_size(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-size"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)
        )
    finally:
        consumer.close()


def plain_consumer(bootstrap: str, topic: str, records: int) -> PeerRun:
    """confluent-kafka reads (librdkafka fetches in its own threads), orjson decodes, a Counter counts."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-plain-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    run = PeerRun()
    counts, dead_letters = run.counts, run.dead_letters
    started = cpu_started = 0.0
    seen = 0
    try:
        while seen < records:
            messages = consumer.consume(10_000, timeout=1.0)
            if messages and not seen:
                started, cpu_started = time.monotonic(), cpu_seconds()
            for message in messages:
                if message.error() is not None:
                    raise RuntimeError(f"{topic}: {message.error()}")
                reason, event_ms, url = classify(message.value(), message.timestamp()[1])
                if reason is None:
                    counts[(event_ms - event_ms % WINDOW_MS, url)] += 1
                else:
                    dead_letters[reason] += 1
            seen += len(messages)
        run.seconds, run.cpu_seconds = time.monotonic() - started, cpu_seconds() - cpu_started
    finally:
        consumer.close()
    run.records = seen
    return run


class _QuixClock:
    """Starts the clock at the first record; when the last valid view reaches the window, stops it and sends
    the markers that close every window."""

    def __init__(self, valid: int, run: PeerRun, close: Callable[[], None]) -> None:
        self.valid, self.run, self.close, self.counted = valid, run, close, 0
        self.started = self.cpu_started = 0.0

    def classify(self, value: bytes | None, _key: Any, timestamp: int, _headers: Any) -> tuple[Any, ...]:
        if not self.counted and not self.started:
            self.started, self.cpu_started = time.monotonic(), cpu_seconds()
        return classify(value, timestamp)

    def keep(self, result: tuple[str | None, int, str]) -> bool:
        if result[0] is None:
            return True
        if self.counted < self.valid:
            self.run.dead_letters[result[0]] += 1
        return False

    def tick(self, _url: str) -> None:
        self.counted += 1
        if self.counted == self.valid:
            self.run.seconds = time.monotonic() - self.started
            self.run.cpu_seconds = cpu_seconds() - self.cpu_started
            self.close()


def quix(
    bootstrap: str,
    topic: str,
    records: int,
    *,
    valid: int,
    markers: list[tuple[int, bytes]],
    idle_seconds: float = 3.0,
) -> PeerRun:
    """Quix Streams, the textbook way: classify, filter, event time from the value, `group_by` the url
    (Quix windows are per message key: it repartitions through an internal topic), a 10 s tumbling window
    with a grace of `QUIX_GRACE_MS` (see records), `count()`, `.final()`: closed windows only, each once;
    Quix's defaults otherwise (at-least-once, state in RocksDB with a changelog topic). `topic` is the
    benchmark's records in a topic of Quix's own: once the last of its `valid` views is counted, the clock
    stops and `markers` are appended to it. (Reading the markers from a second topic instead costs Quix
    about a quarter of its rate: concatenating two topics turns on its partition time alignment.)"""
    from quixstreams import Application  # noqa: PLC0415 (imported only when Quix runs)

    run = PeerRun(records=records)
    producer = Producer({"bootstrap.servers": bootstrap})

    def close() -> None:
        for partition, value in markers:
            producer.produce(topic, value, partition=partition)
        producer.flush(30)

    clock = _QuixClock(valid, run, close)
    with tempfile.TemporaryDirectory(prefix="bench-quix-") as state_dir:
        app = Application(
            broker_address=bootstrap,
            consumer_group=f"bench-quix-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
            state_dir=state_dir,
            loglevel="WARNING",
        )
        sdf = app.dataframe(app.topic(topic, value_deserializer="bytes"))
        sdf = sdf.apply(clock.classify, metadata=True)
        sdf = sdf.filter(clock.keep)
        sdf = sdf.set_timestamp(lambda result, _key, _timestamp, _headers: result[1])
        sdf = sdf.apply(lambda result: result[2])
        sdf = sdf.group_by(lambda url: url, name="url")
        sdf = sdf.update(clock.tick)
        sdf = sdf.tumbling_window(WINDOW_MS, grace_ms=QUIX_GRACE_MS).count().final()
        windows = app.run(timeout=idle_seconds, collect=True, metadata=True)
    if clock.counted != valid + len(markers):
        raise RuntimeError(
            f"Quix counted {clock.counted:,} valid views, the topic and markers hold {valid + len(markers):,}"
        )
    for window in windows:
        url = window["_key"].decode() if isinstance(window["_key"], bytes) else str(window["_key"])
        run.counts[(window_start(int(window["start"])), url)] += int(window["value"])
    return run

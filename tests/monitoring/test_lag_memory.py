"""The exporter's long-lived state kept without a Python object per partition (issue 17, goal 3: memory at
50,000 partitions x 500 groups): the Burrow history's keys and the record-timestamp cache, checked against the
dicts they replace on random collections."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

import numpy as np

from monitoring.lag_exporter.snapshot import Inputs, ProducedHistory, RecordTimestamps, build_snapshot
from monitoring.lag_exporter.sources import Position
from monitoring.lag_exporter.status import (
    STATUS_BY_CODE,
    History,
    Sample,
    ScalarHistory,
    consumption_rate,
    evaluate_partition,
)


class _DictTimestamps:
    """The cache as the loop kept it before: two dicts of (topic, partition, offset) tuples."""

    def __init__(self) -> None:
        self.timestamps: dict[tuple[str, int, int], int] = {}
        self.missing: dict[tuple[str, int, int], float] = {}

    def collect(
        self,
        needed: set[tuple[str, int, int]],
        found: dict[tuple[str, int, int], int],
        now: float,
        retry: float,
    ) -> list[tuple[str, int, int]]:
        to_read = sorted(
            key
            for key in needed
            if key not in self.timestamps and now - self.missing.get(key, -retry) >= retry
        )
        for key in to_read:
            timestamp = found.get(key)
            if timestamp is not None and timestamp >= 0:
                self.timestamps[key] = timestamp
                self.missing.pop(key, None)
            else:
                self.missing[key] = now
        self.timestamps = {key: value for key, value in self.timestamps.items() if key in needed}
        self.missing = {key: value for key, value in self.missing.items() if key in needed}
        return to_read


def test_record_timestamps_as_columns_answer_as_the_dicts_did() -> None:
    """Same keys to read, in the same order, and the same timestamps, over collections whose needed keys
    change (topics come and go: their ids are renumbered), with failed lookups retried after a while,
    repeated keys, partition numbers up to 2**31 - 1 and offsets up to 2**63 - 1."""
    generator = random.Random(35)
    columns, reference = RecordTimestamps(), _DictTimestamps()
    retry, now = 50.0, 1_000.0
    for step in range(120):
        now += generator.choice([1.0, 10.0, 10.0, 60.0])
        first_topic = step * 3  # topics move on: old ids are forgotten
        keys = [
            (
                f"topic-{first_topic + generator.randrange(40)}",
                generator.choice([0, 1, 7, 2**31 - 1]),
                generator.choice([0, 5, 6, 2**40, 2**63 - 1]),
            )
            for _ in range(generator.randrange(0, 300))
        ]
        found = {key: generator.choice([-1, 0, 17, 2**62]) for key in keys if generator.random() < 0.7}
        expected = reference.collect(set(keys), found, now, retry)
        got = columns.retain_needed(
            [key[0] for key in keys], [key[1] for key in keys], [key[2] for key in keys], now, retry
        )
        assert got == expected, step
        columns.store(got, {key: found[key] for key in got if key in found}, now)
        assert len(columns) == len(set(keys))
        asked = [*keys, ("never", 0, 0), (keys[0][0], 3, 3) if keys else ("x", 1, 1)]
        values = columns.get_all(
            [key[0] for key in asked], [key[1] for key in asked], [key[2] for key in asked]
        )
        assert values.tolist() == [reference.timestamps.get(key, -1) for key in asked], step
        assert len(columns._topics) <= 2 * 40 + 64
    assert len(columns._topic_ids) < 3 * 120  # renumbered: not every topic ever seen


def test_history_keys_of_any_shape_keep_their_samples_and_prefixes_go_with_their_last_key() -> None:
    """Keys (source, group, topic, partition) share a prefix per (source, group, topic); other keys (no
    trailing partition number, a negative or too large one, not a tuple) are kept whole. Samples, statuses
    and forgetting are those of the per-partition history; a prefix no key uses is forgotten."""
    window = 30.0
    history, reference = History(window), ScalarHistory(window)
    keys: list[object] = [
        *(("group", f"g{group}", "t", partition) for group in range(3) for partition in range(50)),
        "whole",
        ("g",),
        (),
        ("g", -1),
        ("g", 2**31),
        ("g", 2**31 - 1),
        ("g", "0"),
        ("g", 1.0 + 0.5),
        7,
    ]
    for step in range(8):
        now = 1_000.0 + 10 * step
        offsets = np.array([step * (index % 3) for index in range(len(keys))], np.int64)
        lags = np.array([index % 4 for index in range(len(keys))], np.int64)
        codes, rates = history.record(keys, offsets, lags, np.full(len(keys), math.nan), now)
        for index, key in enumerate(keys):
            samples = reference.record(key, Sample(now, int(offsets[index]), int(lags[index]), None))
            assert history.samples(key) == samples, (step, key)
            expected = (evaluate_partition(samples, now, window), consumption_rate(samples, now, window))
            assert (STATUS_BY_CODE[int(codes[index])], float(rates[index])) == expected, (step, key)
    assert len(history) == len(keys)
    assert len(history._index._ids) == 3 + 9  # one prefix per (source, group, topic), each other key its own
    kept = [key for key in keys if not (isinstance(key, tuple) and key[:2] == ("group", "g1"))]
    history.retain(kept)
    assert len(history) == len(kept)
    assert len(history._index._ids) == 2 + 9
    assert history.samples(("group", "g1", "t", 3)) == []
    assert history.samples(("group", "g0", "t", 3)) == reference.samples(("group", "g0", "t", 3))


def test_the_snapshot_reads_lag_seconds_from_the_column_cache_as_from_a_dict() -> None:
    """build_snapshot gives the same lag seconds with the loop's cache as with the dict it replaces."""
    positions = [
        Position("group", f"g{group}", "t", partition, 10 * group)
        for group in range(3)
        for partition in range(4)
    ]
    latest = {("t", partition): 100 for partition in range(4)}
    earliest = {("t", partition): 5 for partition in range(4)}
    stamps = {
        ("t", partition, offset): 1_000_000 + partition * 1_000 + offset
        for partition in range(3)
        for offset in (10, 20)
    }
    cache = RecordTimestamps()
    keys = sorted({(p.topic, p.partition, max(p.committed, 5)) for p in positions})
    to_read = cache.retain_needed(
        [key[0] for key in keys], [key[1] for key in keys], [key[2] for key in keys], 2_000.0, 10.0
    )
    cache.store(to_read, stamps, 2_000.0)

    def seconds(timestamps: Mapping[tuple[str, int, int], int | None] | RecordTimestamps) -> list[float]:
        snapshot = build_snapshot(
            Inputs(positions, earliest, latest, timestamps), 2_000.0, History(30.0), ProducedHistory()
        )
        values: list[float] = snapshot.columns.lag_seconds.tolist()
        return values

    assert seconds(cache) == seconds(stamps)
    assert seconds(cache) != seconds({})

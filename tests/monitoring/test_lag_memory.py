"""The exporter's long-lived state kept without a Python object per partition (issue 17, goal 3: memory at
50,000 partitions x 500 groups): the Burrow history's keys and the record-timestamp cache, checked against the
dicts they replace on random collections."""

from __future__ import annotations

import itertools
import math
import random
import tracemalloc
import weakref
import zlib
from collections.abc import Mapping

import numpy as np
import pytest

from monitoring.lag_exporter.collector import LagExposition, render_lag_text
from monitoring.lag_exporter.snapshot import (
    GroupLag,
    Inputs,
    PartitionColumns,
    PartitionLag,
    ProducedHistory,
    RecordTimestamps,
    _group_rows,
    build_snapshot,
)
from monitoring.lag_exporter.sources import Position
from monitoring.lag_exporter.status import (
    STATUS_BY_CODE,
    History,
    Sample,
    ScalarHistory,
    Status,
    consumption_rate,
    evaluate_group,
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


def test_groups_of_a_partition_share_its_latest_offsets_with_the_statuses_of_their_own_samples() -> None:
    """The history keeps a partition's latest offsets once for all its groups and gives back each group's
    lags: statuses, rates and samples equal the per-partition rules on each group's own samples, over random
    histories longer than the window (300 s of 10 s collections, 45 of them): groups reading some of the
    topics, joining late, missing collections, forgotten and back; latest offsets moving, truncated and
    beyond int32; committed offsets moving, going back and past the latest offset (lag 0); and collections
    where one group's latest offset differs from the others' or no latest offset is given at all."""
    generator = random.Random(37)
    seen = set()
    for case in range(12):
        window = 300.0
        history, reference = History(window), ScalarHistory(window)
        tps = [(f"t{topic}", partition) for topic in range(3) for partition in range(4)]
        groups = {f"g{group}": generator.sample(range(3), generator.randrange(1, 4)) for group in range(5)}
        keys = [
            ("group", group, topic, partition)
            for group, topics in groups.items()
            for topic, partition in tps
            if int(topic[1:]) in topics
        ]
        latest = {tp: generator.randrange(0, 1_000) for tp in tps}
        committed = {key: latest[(key[2], key[3])] - generator.randrange(0, 50) for key in keys}
        at = 1_700_000_000.0
        for step in range(45):
            at += generator.choice([10.0, 10.0, 10.0, 9.5, 10.5])
            for tp in tps:
                change = generator.choice([0, 0, 1, 7, 40, -5, 2**31 if step == 30 and case % 3 == 0 else 0])
                latest[tp] = max(0, latest[tp] + change)
            sampled, offsets, lags, ends, commits = [], [], [], [], []
            for index, key in enumerate(keys):
                if step < index % 7 or generator.random() < 0.01:
                    continue  # joins late, or missed this collection
                mode = index % 5  # moving, stopped, stalled (committing), going back at times, slow
                if mode == 0:
                    committed[key] += generator.choice([0, 1, 3, 20, 60])
                elif mode == 3:
                    committed[key] += 1 if generator.random() < 0.9 else -2
                elif mode == 4:
                    committed[key] += 1
                end = latest[(key[2], key[3])]
                if generator.random() < 0.01:
                    end += generator.randrange(1, 30)  # another latest offset for this group
                sampled.append(key)
                offsets.append(committed[key])
                lags.append(max(0, end - committed[key]))
                ends.append(end)
                commits.append(at - 1.0 if mode == 2 else generator.choice([math.nan, at - 2 * window]))
            codes, rates = history.record(
                sampled,
                np.array(offsets, np.int64),
                np.array(lags, np.int64),
                np.array(commits),
                at,
                latest=None if step % 11 == 5 else np.array(ends, np.int64),
            )
            for index, key in enumerate(sampled):
                commit = None if math.isnan(commits[index]) else commits[index]
                samples = reference.record(key, Sample(at, offsets[index], lags[index], commit))
                expected = (evaluate_partition(samples, at, window), consumption_rate(samples, at, window))
                assert (STATUS_BY_CODE[int(codes[index])], float(rates[index])) == expected, (case, step, key)
                assert history.samples(key) == samples, (case, step, key)
                seen.add(expected[0])
            if step % 13 == 12:  # a group is no longer reported: forgotten, then new again
                gone = generator.choice(list(groups))
                kept = [key for key in keys if key[1] != gone]
                history.retain(kept)
                reference.retain(kept)
            assert len(history) == len(reference)
    assert seen == set(STATUS_BY_CODE[code] for code in (1, 2, 4, 5, 6))  # every partition status


def test_a_full_window_of_history_keeps_a_partitions_latest_offsets_once_for_all_its_groups() -> None:
    """At 10 groups per partition and a full window, the history's numpy memory is ~6.8 bytes a sample (an
    int32 committed offset per group-partition, an int32 latest offset per partition, each ring 1/8 wider than
    needed, and the per-column arrays), where a committed offset and a lag per group-partition took ~10.4."""
    partitions, groups, window = 400, 10, 300.0
    keys = [("group", f"g{group}", f"t{p // 4}", p % 4) for group in range(groups) for p in range(partitions)]
    latest = np.array([1_000 + p for _ in range(groups) for p in range(partitions)], np.int64)
    tracemalloc.start()
    try:
        history = History(window)
        for step in range(40):
            committed = latest - 20 - (np.arange(len(keys)) % 7) + step // 3  # lag > 0: no latest needed
            history.record(
                keys,
                committed,
                np.maximum(0, latest - committed),
                np.full(len(keys), math.nan),
                1_700_000_000.0 + 10 * step,
            )
        domain = tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)
        kept = sum(
            stat.size for stat in tracemalloc.take_snapshot().filter_traces([domain]).statistics("filename")
        )
    finally:
        tracemalloc.stop()
    samples = 36 * len(keys)  # the ring's slots (a window of 10 s collections, anchor, spares) x columns
    assert kept / samples < 8, kept / samples


def test_produced_history_keeps_no_python_object_per_partition() -> None:
    """The produced offsets of 20,000 partitions that keep two points each: ~120 bytes a partition (the
    columns and the rows' int64 codes), where a dict of (topic, partition) tuples took ~255; retained and
    forgotten partitions answer as before."""
    produced = ProducedHistory()
    tracemalloc.start()
    try:
        for step in range(3):
            tps = [(f"topic-{index // 10:05d}", index % 10) for index in range(20_000)]
            produced.record_all(tps, [index * 3 for index in range(20_000)], 1_000.0 + step)
            del tps
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept / 20_000 < 140, kept / 20_000
    assert produced.points(("topic-00001", 3)) == ((39, 1_000.0), (39, 1_002.0))
    produced.retain([("topic-00001", 3), ("topic-00002", 0)])
    assert len(produced) == 2
    assert produced.points(("topic-00001", 4)) == ()
    assert produced.points(("topic-00002", 0)) == ((60, 1_000.0), (60, 1_002.0))
    produced.record_all([("topic-00002", 0), ("topic-00003", 1)], [61, 7], 1_003.0)
    produced.retain_recorded()  # forgets topic-00001's partition 3, as retain() with these two would
    assert len(produced) == 2 and produced.points(("topic-00001", 3)) == ()
    assert produced.points(("topic-00002", 0)) == ((60, 1_000.0), (60, 1_002.0), (61, 1_003.0))


def test_the_history_refuses_a_lag_below_zero() -> None:
    """Lags are kept as max(0, latest offset - committed offset): one below 0 cannot be, and is refused
    rather than given back as 0 (the snapshot clamps lags at 0 before recording them)."""
    history = History(30.0)
    with pytest.raises(ValueError, match="below 0"):
        history.record([("group", "g", "t", 0)], np.array([5]), np.array([-1]), np.array([math.nan]), 1_000.0)
    assert len(history) == 0


def test_the_history_evaluates_a_collection_without_a_dozen_copies_of_its_columns() -> None:
    """Recording and evaluating a collection of 30,000 group-partitions over a full window allocates ~83
    bytes a column at its peak (the result, the columns' lags a collection at a time, a few masks), where
    a dozen per-column arrays alive at once and copies of the values took ~127: at 150,000 columns the
    collection's peak was ~7 MB higher. Statuses stay those of the per-partition rules (tests above)."""
    partitions, groups = 3_000, 10
    keys = [
        ("group", f"g{group}", f"t{p // 10}", p % 10) for group in range(groups) for p in range(partitions)
    ]
    latest = np.array([1_000 + p for _ in range(groups) for p in range(partitions)], np.int64)
    committed = latest - 20 - (np.arange(len(keys)) % 7)
    lag = np.maximum(0, latest - committed)
    commits = np.full(len(keys), math.nan)
    history = History(300.0)
    peaks = []
    tracemalloc.start()
    try:
        for step in range(32):
            before, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            codes, rates = history.record(
                keys, committed, lag, commits, 1_700_000_000.0 + 10 * step, latest=latest
            )
            peaks.append((tracemalloc.get_traced_memory()[1] - before) / len(keys))
            del codes, rates
    finally:
        tracemalloc.stop()
    steady = sorted(peaks[-10:])[5]  # the ring is not grown in these
    assert steady < 100, peaks[-10:]
    codes, _ = history.record(keys, committed, lag, commits, 1_700_000_400.0, latest=latest)
    assert set(codes.tolist()) == {Status.STOP.code}  # a full window without a move, no commit seen


def test_a_rendering_does_not_keep_its_snapshot_alive() -> None:
    """The rendering served while the next one is made refers to its snapshot weakly: the snapshot the loop
    has replaced is freed before the new rendering (its columns, ~14 MB at 150,000 rows, lived through it,
    the collection's peak). A snapshot still held is still recognised as rendered."""
    positions = [
        Position("group", f"g{group}", f"t{p // 10}", p % 10, 100 + p - group)
        for group in range(3)
        for p in range(40)
    ]
    ends = {(f"t{p // 10}", p % 10): 100 + p for p in range(40)}
    starts = dict.fromkeys(ends, 0)
    history, produced = History(300.0), ProducedHistory()
    exposition = LagExposition()
    old = build_snapshot(Inputs(positions, starts, ends), 1_700_000_000.0, history, produced)
    rendered = exposition.prepare(old)
    assert exposition.current(old) is rendered and rendered.snapshot is old
    gone = weakref.ref(old)
    del old
    assert gone() is None
    new = build_snapshot(Inputs(positions, starts, ends), 1_700_000_010.0, history, produced)
    with exposition._lock:  # while the loop renders `new`, a scrape gets the previous rendering
        assert exposition.current(new) is rendered
    assert exposition.current(new).snapshot is new
    assert (
        zlib.decompress(b"".join(exposition.current(new).gzip_with(b"")), wbits=31)
        == "".join(render_lag_text(new)).encode()
    )


def test_group_rows_are_the_same_whatever_the_order_of_the_partition_rows() -> None:
    """Group rows (sums, highest lag and lag seconds, Burrow's group status) from partition rows in
    (source, group) order, as the group source makes them (runs found in place), and from the same rows
    shuffled (sorted first), against a computation per group over the rows."""
    generator = random.Random(38)
    statuses = [Status.OK, Status.WARN, Status.STOP, Status.STALL, Status.REWIND]
    for case in range(20):
        rows = [
            PartitionLag(
                generator.choice(["checkpoint", "group", "shadow"]),
                f"g{generator.randrange(6)}",
                f"t{generator.randrange(3)}",
                partition,
                0,
                0,
                0,
                generator.choice([0, 0, 3, 2**40]),
                generator.choice([0.0, 1.5, 7.25, math.inf]),
                0.0,
                0.0,
                0,
                generator.choice(statuses),
            )
            for partition in range(generator.randrange(1, 60))
        ]
        ordered = sorted(rows, key=lambda row: (row.source, row.group))
        expected = []
        for (source, group), members in itertools.groupby(ordered, key=lambda row: (row.source, row.group)):
            members_ = list(members)
            expected.append(
                GroupLag(
                    source,
                    group,
                    sum(row.lag for row in members_),
                    max(row.lag for row in members_),
                    max(row.lag_seconds for row in members_),
                    evaluate_group(row.status for row in members_),
                )
            )
        for order in (ordered, rows):
            assert _group_rows(PartitionColumns.from_rows(order)) == expected, case


def test_the_loops_snapshot_frees_what_was_read_once_it_is_in_columns() -> None:
    """`release_inputs` (the refresh loop's) empties the inputs' earliest and latest offsets and positions
    once they are in columns, so the two dicts of 50,000 (topic, partition) keys and the 150,000 positions do
    not live through the history's recording and the lag seconds; the snapshot is the same as without it,
    rendered byte for byte."""
    positions = [
        Position("group", f"g{group}", f"t{p // 10}", p % 10, 100 + p - 3 * group)
        for group in range(4)
        for p in range(50)
    ]
    ends = {(f"t{p // 10}", p % 10): 100 + p for p in range(50)}
    starts = {tp: (5 if tp[1] == 3 else 0) for tp in ends}
    texts = []
    for release in (False, True):
        history, produced = History(300.0), ProducedHistory()
        for step in range(3):
            inputs = Inputs(positions, dict(starts), dict(ends))
            snapshot = build_snapshot(
                inputs, 1_700_000_000.0 + 10 * step, history, produced, release_inputs=release
            )
        assert (inputs.earliest, inputs.latest) == (({}, {}) if release else (starts, ends))
        assert len(inputs.positions) == (0 if release else len(positions))
        assert snapshot.offsets[3].earliest == 5 and len(snapshot.offsets) == 50
        texts.append("".join(render_lag_text(snapshot)))
    assert texts[0] == texts[1]

"""The background loop: every `--refresh-interval` it reads Kafka and the checkpoints, publishes a snapshot.

One collection, in this order: checkpoints (files), consumer groups and their committed offsets, which
partitions exist (positions on deleted topics or partitions are dropped; a reader may read them beside the
groups' offsets), latest and earliest offsets; then, without failing the collection when they fail and each
in its own thread, commit times from `__consumer_offsets` and the timestamps of the records at the committed
offsets. A failure before the offsets are in keeps the previous snapshot (`exporter_up` 0, `exporter_stale`
1), closes the Kafka clients and tries again next interval, so a broker that comes back is picked up by
itself. A different cluster id after a reconnect (a new cluster on the same address) clears every history
and cache.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol, runtime_checkable

from monitoring.lag_exporter.collector import ExporterHealth
from monitoring.lag_exporter.config import ExporterConfig
from monitoring.lag_exporter.snapshot import (
    Inputs,
    ProducedHistory,
    RecordTimestamps,
    Snapshot,
    build_snapshot,
    timestamp_offset,
)
from monitoring.lag_exporter.sources import (
    TP,
    CheckpointRead,
    CheckpointSource,
    ConsumerGroupSource,
    GroupRead,
    Position,
)
from monitoring.lag_exporter.status import History

log = logging.getLogger(__name__)

CommitTimes = Mapping[tuple[str, str, int], float]  # (group, topic, partition) -> its latest commit's time


class OffsetReader(Protocol):
    """What the loop needs from Kafka (implemented by kafka_reader.KafkaReader)."""

    cluster_id: str | None

    def list_groups(self) -> list[str]: ...

    def committed_offsets(self, groups: Iterable[str]) -> tuple[dict[str, dict[TP, int]], list[str]]: ...

    def partitions(self, topics: Iterable[str]) -> dict[str, set[int]]: ...

    def latest_offsets(self, tps: Iterable[TP]) -> dict[TP, int]: ...

    def earliest_offsets(self, tps: Iterable[TP]) -> dict[TP, int]: ...

    def record_timestamps(self, wanted: Mapping[TP, int], budget: float) -> dict[TP, int]: ...

    def commit_times(self, budget: float) -> CommitTimes: ...

    def forget_commits_before(self, cutoff: float) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class ReadsBothEnds(Protocol):
    """A reader that reads the latest and earliest offsets of the partitions at once."""

    def latest_and_earliest_offsets(self, tps: Iterable[TP]) -> tuple[dict[TP, int], dict[TP, int]]: ...


@runtime_checkable
class ReadsPartitionsAhead(Protocol):
    """A reader that can start reading which partitions exist before `partitions()` is called."""

    def read_partitions_ahead(self) -> None: ...


@runtime_checkable
class ReadsManyOffsets(Protocol):
    """A reader that reads the timestamps at several offsets of a partition in one pass."""

    def timestamps_at(
        self, wanted: Mapping[TP, Iterable[int]], budget: float
    ) -> dict[tuple[str, int, int], int]: ...


class Refresher:
    """Owns the histories and the latest snapshot; `refresh()` is one collection, `run()` the loop."""

    def __init__(
        self,
        config: ExporterConfig,
        reader: OffsetReader,
        health: ExporterHealth,
        clock: Callable[[], float] = time.time,
        on_publish: Callable[[Snapshot], object] | None = None,
    ) -> None:
        self._config = config
        self._on_publish = on_publish  # e.g. render the snapshot for /metrics, in this thread
        self._reader = reader
        self._health = health
        self._clock = clock
        self._groups = ConsumerGroupSource(reader, config.groups, config.shadow_prefix)
        self._checkpoints = CheckpointSource(config.checkpoints)
        self._history = History(config.window)
        self._produced = ProducedHistory()
        # (topic, partition, offset) -> the record's timestamp (ms), or when a lookup found no record (retried
        # after a while; meanwhile lag seconds are interpolated)
        self._timestamps = RecordTimestamps()
        self._cluster_id: str | None = None
        self._snapshot: Snapshot | None = None
        self._collected = False  # a collection has succeeded: failed ones serve its values, stale
        self._lock = threading.Lock()

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self._snapshot

    def _publish(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._snapshot = snapshot
        if self._on_publish is not None:
            self._on_publish(snapshot)

    @property
    def _budget(self) -> float:
        """Seconds the optional lookups (commit log, record timestamps) may take each."""
        return min(self._config.kafka_timeout, max(2.0, self._config.refresh_interval / 2))

    def refresh(self) -> bool:
        """One collection; True if it reached Kafka and published a new snapshot."""
        started = time.monotonic()
        checkpoints = self._checkpoints.read() if self._config.checkpoints else CheckpointRead((), ())
        if checkpoints.errors:
            self._health.error("checkpoint", len(checkpoints.errors))
        try:
            positions, latest, earliest = self._read_offsets(checkpoints)
        except Exception as error:
            log.warning("collection failed: %s: %s", type(error).__name__, error)
            self._health.error("kafka")
            self._reader.close()
            previous = self.latest()
            self._publish(
                previous.replace(checkpoints=checkpoints.health)
                if previous is not None
                else Snapshot(taken_at=self._clock(), checkpoints=checkpoints.health)
            )
            self._health.failed(time.monotonic() - started, have_values=self._collected)
            return False
        now = self._clock()
        # the commit log read beside the record timestamps (each mostly waits for brokers); its consumer's
        # set-up took 0.12 s of a first collection at 50,000 x 500
        reads_commit_log = self._config.commit_log and any(p.source != "checkpoint" for p in positions)
        with ThreadPoolExecutor(1, thread_name_prefix="lag-commit-log") as commit_log:
            commit_times = (
                commit_log.submit(self._reader.commit_times, self._budget) if reads_commit_log else None
            )
            self._produced.record_all(list(latest), latest.values(), now)
            self._produced.retain_recorded()  # every partition not in `latest`
            timestamps = self._record_timestamps(positions, latest, earliest, now)
            if commit_times is not None:
                positions = self._with_commit_times(positions, commit_times, now)
        inputs = Inputs(positions, earliest, latest, timestamps, checkpoints.health)
        # held by `inputs` alone: build_snapshot frees them as soon as they are in columns
        del positions, latest, earliest
        snapshot = build_snapshot(
            inputs,
            now,
            self._history,
            self._produced,
            self._config.granularity,
            release_inputs=True,
        )
        # what was read is in the snapshot now: freed before the rendering (on_publish), the collection's peak
        del timestamps, inputs
        self._publish(snapshot)
        self._collected = True
        self._health.succeeded(now, time.monotonic() - started)
        return True

    def _read_offsets(
        self, checkpoints: CheckpointRead
    ) -> tuple[list[Position], dict[TP, int], dict[TP, int]]:
        if isinstance(self._reader, ReadsPartitionsAhead):
            self._reader.read_partitions_ahead()
        groups = self._groups.read() if self._config.include_groups else GroupRead(())
        if groups.failed_groups:
            self._health.error("group", len(groups.failed_groups))
        read = (*groups.positions, *checkpoints.positions)
        # the topic filter once per topic, not per position (150,000 at 50,000 x 500)
        topics = {topic for topic in {position.topic for position in read} if self._config.topics(topic)}
        existing = self._reader.partitions(topics)
        self._check_cluster()
        positions = [position for position in read if position.partition in existing.get(position.topic, ())]
        del read
        tps = sorted({(position.topic, position.partition) for position in positions})
        # after the committed offsets: lag is never negative
        if isinstance(self._reader, ReadsBothEnds):
            latest, earliest = self._reader.latest_and_earliest_offsets(tps)
        else:
            latest = self._reader.latest_offsets(tps)
            earliest = self._reader.earliest_offsets(tps)
        return positions, latest, earliest

    def _check_cluster(self) -> None:
        cluster_id = self._reader.cluster_id
        if self._cluster_id is not None and cluster_id != self._cluster_id:
            log.warning("cluster id changed from %s to %s: clearing history", self._cluster_id, cluster_id)
            self._history.clear()
            self._produced.clear()
            self._timestamps.clear()
            self._reader.forget_commits_before(float("inf"))
        self._cluster_id = cluster_id

    def _with_commit_times(
        self, positions: list[Position], commit_times: Future[CommitTimes], now: float
    ) -> list[Position]:
        """`positions` with the times of their latest commits, once `commit_times` (the reader's, started
        before the record timestamps) has them."""
        try:
            times = commit_times.result()
        except Exception as error:
            log.warning("reading the commit log failed: %s: %s", type(error).__name__, error)
            self._health.error("commit_log")
            return positions
        if times:  # else their last_commit is None already
            self._apply_commit_times(positions, times)
        # after they were applied: `times` may be the reader's own mapping (not a copy of 150,000 entries)
        self._reader.forget_commits_before(now - 2 * self._config.window)
        return positions

    @staticmethod
    def _apply_commit_times(positions: list[Position], times: CommitTimes) -> None:
        # in place: a second list of 150,000 positions would live beside the first
        for index, position in enumerate(positions):
            if position.source != "checkpoint":
                at = times.get((position.group, position.topic, position.partition))
                if at is not None:
                    positions[index] = Position(
                        position.source,
                        position.group,
                        position.topic,
                        position.partition,
                        position.committed,
                        at,
                    )

    def _record_timestamps(
        self, positions: list[Position], latest: Mapping[TP, int], earliest: Mapping[TP, int], now: float
    ) -> RecordTimestamps:
        """Timestamps of the records at the lagging consumers' offsets, from the cache or read now."""
        topics: list[str] = []
        partitions: list[int] = []
        offsets: list[int] = []
        for position in positions:
            tp = (position.topic, position.partition)
            end, start = latest.get(tp), earliest.get(tp)
            if end is not None and start is not None and position.committed < end:
                topics.append(position.topic)
                partitions.append(position.partition)
                offsets.append(timestamp_offset(position.committed, start))
        retry_after = max(5 * self._config.refresh_interval, 10.0)
        # the cache keeps the needed keys only, as it did: the snapshot reads it as it is
        to_read = self._timestamps.retain_needed(topics, partitions, offsets, now, retry_after)
        del topics, partitions, offsets
        found: dict[tuple[str, int, int], int] = {}
        if not isinstance(self._reader, ReadsManyOffsets):
            found = self._timestamps_in_rounds(to_read, time.monotonic() + self._budget)
        elif to_read:
            by_partition: dict[TP, list[int]] = {}
            for topic, partition, offset in to_read:
                by_partition.setdefault((topic, partition), []).append(offset)
            try:
                found = self._reader.timestamps_at(by_partition, self._budget)
            except Exception as error:
                self._timestamp_error(error)
        self._timestamps.store(to_read, found, now)
        return self._timestamps

    def _timestamps_in_rounds(
        self, to_read: list[tuple[str, int, int]], deadline: float
    ) -> dict[tuple[str, int, int], int]:
        """For a reader asked one offset per partition at a time: groups at different offsets of a partition
        take several rounds."""
        rounds: list[dict[TP, int]] = []
        for topic, partition, offset in to_read:
            for round_ in rounds:
                if (topic, partition) not in round_:
                    round_[(topic, partition)] = offset
                    break
            else:
                rounds.append({(topic, partition): offset})
        found: dict[tuple[str, int, int], int] = {}
        for round_ in rounds:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                answered = self._reader.record_timestamps(round_, remaining)
            except Exception as error:
                self._timestamp_error(error)
                continue
            found.update(((*tp, round_[tp]), timestamp) for tp, timestamp in answered.items() if tp in round_)
        return found

    def _timestamp_error(self, error: Exception) -> None:
        log.warning("reading record timestamps failed: %s: %s", type(error).__name__, error)
        self._health.error("timestamp")

    def run(self, stop: threading.Event) -> None:
        """Collect every refresh interval until `stop` is set; never raises."""
        trim = _heap_trimmer()
        while not stop.is_set():
            started = time.monotonic()
            # No cyclic garbage collection during a collection: it allocates a few million objects (Kafka's
            # answers, the rows), each 100,000 of which set off a pass over the young objects (10-140 ms
            # measured at 50,000 x 500) that stalls every thread, a scrape too; and the objects are freed by
            # their reference counts anyway. Enabled again between collections, where the first pass looks
            # at what survived the collection only.
            gc.disable()
            try:
                self.refresh()
            except Exception:
                log.exception("collection failed unexpectedly")
                self._health.error("internal")
            finally:
                gc.enable()
            if trim is not None:
                trim(0)
            stop.wait(max(0.0, self._config.refresh_interval - (time.monotonic() - started)))
        self._reader.close()


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD = 128 * 1024


def map_large_allocations() -> bool:
    """Make glibc serve every allocation of MMAP_THRESHOLD bytes or more (numpy's columns and temporaries:
    1.2 MB each at 150,000 rows) with its own mmap, returned to the OS when freed; False without glibc.

    glibc starts at this threshold but raises it (up to 32 MB) each time such a block is freed, after which
    the columns a collection computes and frees come from the heap: their pages stay in RSS until a trim
    (`_heap_trimmer`, once per collection), so the collection's peak holds every temporary of its busiest
    phase. Setting the threshold turns that adjustment off (mallopt(3)). Safe: only where memory comes from
    changes, not what a program sees; measured at 50,000 partitions x 500 groups without Kafka: peak RSS of a
    later collection 203-217 -> 198-207 MB at the same CPU time."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def _heap_trimmer() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None (musl, macOS). A collection allocates and frees tens of megabytes (Kafka
    responses, the previous snapshot); glibc keeps freed pages mapped, so without a trim the process's RSS
    stays at the busiest moment of any collection instead of what it holds between collections."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    return trim

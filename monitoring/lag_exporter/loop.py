"""The background loop: every `--refresh-interval` it reads Kafka and the checkpoints, publishes a snapshot.

One collection, in this order: checkpoints (files), consumer groups and their committed offsets, which
partitions exist (positions on deleted topics or partitions are dropped), latest offsets, earliest offsets;
then, without failing the collection when they fail, commit times from `__consumer_offsets` and the
timestamps of the records at the committed offsets. A failure before the offsets are in keeps the previous
snapshot (`exporter_up` 0, `exporter_stale` 1), closes the Kafka clients and tries again next interval, so a
broker that comes back is picked up by itself. A different cluster id after a reconnect (a new cluster on the
same address) clears every history and cache.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from monitoring.lag_exporter.collector import ExporterHealth
from monitoring.lag_exporter.config import ExporterConfig
from monitoring.lag_exporter.snapshot import (
    Inputs,
    ProducedHistory,
    Snapshot,
    build_snapshot,
    timestamp_offset,
)
from monitoring.lag_exporter.sources import (
    CheckpointRead,
    CheckpointSource,
    ConsumerGroupSource,
    GroupRead,
    Position,
)
from monitoring.lag_exporter.status import History

log = logging.getLogger(__name__)

TP = tuple[str, int]


class OffsetReader(Protocol):
    """What the loop needs from Kafka (implemented by kafka_reader.KafkaReader)."""

    cluster_id: str | None

    def list_groups(self) -> list[str]: ...

    def committed_offsets(self, groups: Iterable[str]) -> tuple[dict[str, dict[TP, int]], list[str]]: ...

    def partitions(self, topics: Iterable[str]) -> dict[str, set[int]]: ...

    def latest_offsets(self, tps: Iterable[TP]) -> dict[TP, int]: ...

    def earliest_offsets(self, tps: Iterable[TP]) -> dict[TP, int]: ...

    def record_timestamps(self, wanted: Mapping[TP, int], budget: float) -> dict[TP, int]: ...

    def commit_times(self, budget: float) -> dict[tuple[str, str, int], float]: ...

    def forget_commits_before(self, cutoff: float) -> None: ...

    def close(self) -> None: ...


class Refresher:
    """Owns the histories and the latest snapshot; `refresh()` is one collection, `run()` the loop."""

    def __init__(
        self,
        config: ExporterConfig,
        reader: OffsetReader,
        health: ExporterHealth,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._reader = reader
        self._health = health
        self._clock = clock
        self._groups = ConsumerGroupSource(reader, config.groups, config.shadow_prefix)
        self._checkpoints = CheckpointSource(config.checkpoints)
        self._history = History(config.window)
        self._produced = ProducedHistory()
        # (topic, partition, offset) -> the record's timestamp (ms); lookups that found no record -> when
        # they failed (retried after a while; meanwhile lag seconds are interpolated)
        self._timestamps: dict[tuple[str, int, int], int] = {}
        self._missing: dict[tuple[str, int, int], float] = {}
        self._cluster_id: str | None = None
        self._snapshot: Snapshot | None = None
        self._lock = threading.Lock()

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self._snapshot

    def _publish(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._snapshot = snapshot

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
                dataclasses.replace(previous, checkpoints=checkpoints.health)
                if previous is not None
                else Snapshot(taken_at=self._clock(), checkpoints=checkpoints.health)
            )
            self._health.failed(time.monotonic() - started, have_values=previous is not None)
            return False
        now = self._clock()
        positions = self._with_commit_times(positions, now)
        for tp, offset in latest.items():
            self._produced.record(tp, offset, now)
        self._produced.retain(latest)
        timestamps = self._record_timestamps(positions, latest, earliest, now)
        snapshot = build_snapshot(
            Inputs(positions, earliest, latest, timestamps, checkpoints.health),
            now,
            self._history,
            self._produced,
            self._config.granularity,
        )
        self._publish(snapshot)
        self._health.succeeded(now, time.monotonic() - started)
        return True

    def _read_offsets(
        self, checkpoints: CheckpointRead
    ) -> tuple[list[Position], dict[TP, int], dict[TP, int]]:
        groups = self._groups.read() if self._config.include_groups else GroupRead(())
        if groups.failed_groups:
            self._health.error("group", len(groups.failed_groups))
        positions = [
            position
            for position in (*groups.positions, *checkpoints.positions)
            if self._config.topics(position.topic)
        ]
        existing = self._reader.partitions({position.topic for position in positions})
        self._check_cluster()
        positions = [
            position for position in positions if position.partition in existing.get(position.topic, ())
        ]
        tps = sorted({(position.topic, position.partition) for position in positions})
        latest = self._reader.latest_offsets(tps)  # after the committed offsets: lag is never negative
        earliest = self._reader.earliest_offsets(tps)
        return positions, latest, earliest

    def _check_cluster(self) -> None:
        cluster_id = self._reader.cluster_id
        if self._cluster_id is not None and cluster_id != self._cluster_id:
            log.warning("cluster id changed from %s to %s: clearing history", self._cluster_id, cluster_id)
            self._history.clear()
            self._produced.clear()
            self._timestamps.clear()
            self._missing.clear()
            self._reader.forget_commits_before(float("inf"))
        self._cluster_id = cluster_id

    def _with_commit_times(self, positions: list[Position], now: float) -> list[Position]:
        if not self._config.commit_log or not any(position.source != "checkpoint" for position in positions):
            return positions
        try:
            times = self._reader.commit_times(self._budget)
        except Exception as error:
            log.warning("reading the commit log failed: %s: %s", type(error).__name__, error)
            self._health.error("commit_log")
            return positions
        self._reader.forget_commits_before(now - 2 * self._config.window)
        return [
            dataclasses.replace(
                position, last_commit=times.get((position.group, position.topic, position.partition))
            )
            if position.source != "checkpoint"
            else position
            for position in positions
        ]

    def _record_timestamps(
        self, positions: list[Position], latest: Mapping[TP, int], earliest: Mapping[TP, int], now: float
    ) -> dict[tuple[str, int, int], int | None]:
        """Timestamps of the records at the lagging consumers' offsets, from the cache or read now."""
        needed: set[tuple[str, int, int]] = set()
        for position in positions:
            tp = (position.topic, position.partition)
            if tp in latest and tp in earliest and position.committed < latest[tp]:
                needed.add((*tp, timestamp_offset(position.committed, earliest[tp])))
        retry_after = max(5 * self._config.refresh_interval, 10.0)
        to_read = sorted(
            key
            for key in needed
            if key not in self._timestamps and now - self._missing.get(key, -retry_after) >= retry_after
        )
        # One lookup per partition at a time: groups at different offsets of a partition take several rounds.
        rounds: list[dict[TP, int]] = []
        for topic, partition, offset in to_read:
            for round_ in rounds:
                if (topic, partition) not in round_:
                    round_[(topic, partition)] = offset
                    break
            else:
                rounds.append({(topic, partition): offset})
        deadline = time.monotonic() + self._budget
        for round_ in rounds:
            remaining = deadline - time.monotonic()
            found: dict[TP, int] = {}
            if remaining > 0:
                try:
                    found = self._reader.record_timestamps(round_, remaining)
                except Exception as error:
                    log.warning("reading record timestamps failed: %s: %s", type(error).__name__, error)
                    self._health.error("timestamp")
            for tp, offset in round_.items():
                if tp in found and found[tp] >= 0:
                    self._timestamps[(*tp, offset)] = found[tp]
                    self._missing.pop((*tp, offset), None)
                else:
                    self._missing[(*tp, offset)] = now
        self._timestamps = {key: value for key, value in self._timestamps.items() if key in needed}
        self._missing = {key: value for key, value in self._missing.items() if key in needed}
        return {key: self._timestamps.get(key) for key in needed}

    def run(self, stop: threading.Event) -> None:
        """Collect every refresh interval until `stop` is set; never raises."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.refresh()
            except Exception:
                log.exception("collection failed unexpectedly")
                self._health.error("internal")
            stop.wait(max(0.0, self._config.refresh_interval - (time.monotonic() - started)))
        self._reader.close()

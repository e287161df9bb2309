"""Where consumer positions come from: Kafka consumer groups (ordinary and shadow) and Spark checkpoints.

A *position* is what a consumer has processed: the next offset it will read, the same meaning as a Kafka
commit. Sources are small classes behind small interfaces so the collector and the loop are tested without
Kafka.

Spark checkpoints are read directly (Spark never commits to Kafka). A query checkpoint holds `offsets/<N>`
(written before batch N runs) and `commits/<N>` (written when it is done); the processed position is
`offsets/<highest N present in commits/>`, parsed by `contracts.offset_log` as the jobs parse it (versions
other than `v1` fail clearly; when one query reads a partition through several sources, the lowest offset
counts).

`--checkpoint-dir NAME=PATH`: when PATH itself holds `offsets/` or `commits/` it is one query checkpoint and
its group label is NAME; otherwise every direct subdirectory holding `offsets/` or `commits/` is a query
checkpoint labelled `NAME/<subdirectory>` (the jobs checkpoint each query under `<root>/<query name>`).
A checkpoint that cannot be read (missing, corrupt or half-written) is reported unreadable and keeps the last
positions read from it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple, Protocol

from contracts.offset_log import OffsetLogError, parse_offset_log
from monitoring.lag_exporter.config import CheckpointDir, NameFilter
from monitoring.lag_exporter.pruning import keep_only

log = logging.getLogger(__name__)

Source = Literal["group", "shadow", "checkpoint"]
TP = tuple[str, int]


class Position(NamedTuple):
    """A consumer's processed position in one partition (a named tuple: a collection makes one for each of
    150,000 group-partitions at 50,000 x 500, where a frozen dataclass took three times as long)."""

    source: Source
    group: str
    topic: str
    partition: int
    committed: int
    last_commit: float | None = None  # wall time of the latest commit seen, when known

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.source, self.group, self.topic, self.partition)


class GroupReader(Protocol):
    """The part of the Kafka reader the group source needs."""

    def list_groups(self) -> list[str]: ...

    def committed_offsets(self, groups: Iterable[str]) -> tuple[dict[str, dict[TP, int]], list[str]]: ...


@dataclass(frozen=True)
class GroupRead:
    positions: tuple[Position, ...]
    failed_groups: tuple[str, ...] = ()


class ConsumerGroupSource:
    """Committed offsets of the consumer groups that pass the filter; shadow groups labelled as such."""

    def __init__(self, reader: GroupReader, groups: NameFilter, shadow_prefix: str) -> None:
        self._reader = reader
        self._groups = groups
        self._shadow_prefix = shadow_prefix

    def source_of(self, group: str) -> Source:
        return "shadow" if self._shadow_prefix and group.startswith(self._shadow_prefix) else "group"

    def read(self) -> GroupRead:
        groups = [group for group in self._reader.list_groups() if self._groups(group)]
        offsets, failed = self._reader.committed_offsets(groups)
        positions: list[Position] = []
        for group in sorted(offsets):
            committed = offsets.pop(group)  # freed as its positions are made, not after them all
            source = self.source_of(group)
            positions.extend(
                Position(source, group, topic, partition, offset)
                for (topic, partition), offset in sorted(committed.items())
            )
            del committed
        return GroupRead(tuple(positions), tuple(failed))


class CheckpointError(Exception):
    """A checkpoint file is missing, corrupt or in a format this exporter does not read."""


@dataclass(frozen=True)
class QueryCheckpoint:
    """The processed position read from one query checkpoint."""

    batch: int | None  # the highest committed batch, None before the first commit
    offsets: Mapping[TP, int]
    last_commit: float | None  # modification time of commits/<batch>


def _batch_ids(directory: Path) -> list[int]:
    """Batch ids of a metadata log directory: file names that are integers (skips .crc and temp files)."""
    if not directory.is_dir():
        return []
    return sorted(int(entry.name) for entry in directory.iterdir() if entry.name.isdigit())


def parse_offsets_file(text: str, where: str = "offsets file") -> dict[TP, int]:
    """{(topic, partition): offset} of the Kafka sources of one `offsets/<N>` file (contracts.offset_log)."""
    try:
        return dict(parse_offset_log(text, where).end_offsets)
    except OffsetLogError as error:
        raise CheckpointError(str(error)) from None


def _check_commit_file(path: Path) -> None:
    lines = path.read_text().split("\n")
    if not lines or not lines[0].startswith("v") or len(lines) < 2:
        raise CheckpointError(f"{path}: incomplete commit file")
    try:
        json.loads(lines[1])
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path}: commit metadata is not JSON ({error})") from None


def read_query_checkpoint(path: Path) -> QueryCheckpoint:
    """The processed position of one query checkpoint directory."""
    try:
        commits = _batch_ids(path / "commits")
        if not commits:
            return QueryCheckpoint(None, {}, None)
        batch = commits[-1]
        commit_file = path / "commits" / str(batch)
        _check_commit_file(commit_file)
        offsets_file = path / "offsets" / str(batch)
        if not offsets_file.is_file():
            raise CheckpointError(f"{offsets_file}: missing, but {commit_file} exists")
        offsets = parse_offsets_file(offsets_file.read_text(), str(offsets_file))
        return QueryCheckpoint(batch, offsets, commit_file.stat().st_mtime)
    except OSError as error:
        raise CheckpointError(f"{path}: {error}") from None
    except UnicodeDecodeError as error:
        raise CheckpointError(f"{path}: not text ({error})") from None


def _is_query_checkpoint(path: Path) -> bool:
    return (path / "offsets").is_dir() or (path / "commits").is_dir()


def discover(checkpoint: CheckpointDir) -> list[tuple[str, Path]]:
    """(group label, query checkpoint path) pairs of a configured checkpoint directory."""
    path = checkpoint.path
    if not path.is_dir():
        raise CheckpointError(f"--checkpoint-dir {checkpoint.name}={path}: not a directory")
    if _is_query_checkpoint(path):
        return [(checkpoint.name, path)]
    try:
        children = sorted(child for child in path.iterdir() if child.is_dir() and _is_query_checkpoint(child))
    except OSError as error:
        raise CheckpointError(f"--checkpoint-dir {checkpoint.name}={path}: {error}") from None
    return [(f"{checkpoint.name}/{child.name}", child) for child in children]


@dataclass(frozen=True)
class CheckpointHealth:
    checkpoint: str  # the configured NAME
    group: str  # the group label (NAME or NAME/<query>)
    readable: bool
    error: str | None = None


@dataclass(frozen=True)
class CheckpointRead:
    positions: tuple[Position, ...]
    health: tuple[CheckpointHealth, ...]

    @property
    def errors(self) -> list[str]:
        return [entry.error for entry in self.health if entry.error is not None]


class CheckpointSource:
    """Reads every configured checkpoint each time; an unreadable one keeps its last good positions."""

    def __init__(self, checkpoints: Sequence[CheckpointDir]) -> None:
        self._checkpoints = tuple(checkpoints)
        self._last_good: dict[str, QueryCheckpoint] = {}

    def read(self) -> CheckpointRead:
        positions: list[Position] = []
        health: list[CheckpointHealth] = []
        seen: set[str] = set()
        for checkpoint in self._checkpoints:
            try:
                queries = discover(checkpoint)
            except CheckpointError as error:
                log.warning("%s", error)
                health.append(CheckpointHealth(checkpoint.name, checkpoint.name, False, str(error)))
                continue
            if not queries:
                health.append(CheckpointHealth(checkpoint.name, checkpoint.name, True))
            for group, path in queries:
                seen.add(group)
                try:
                    query = read_query_checkpoint(path)
                except CheckpointError as error:
                    log.warning("%s", error)
                    health.append(CheckpointHealth(checkpoint.name, group, False, str(error)))
                    query_or_none = self._last_good.get(group)
                    if query_or_none is None:
                        continue
                    query = query_or_none
                else:
                    self._last_good[group] = query
                    health.append(CheckpointHealth(checkpoint.name, group, True))
                positions.extend(
                    Position("checkpoint", group, topic, partition, offset, query.last_commit)
                    for (topic, partition), offset in sorted(query.offsets.items())
                )
        keep_only(self._last_good, seen)  # forgets query directories that went away
        return CheckpointRead(tuple(positions), tuple(health))

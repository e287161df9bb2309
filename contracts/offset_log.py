"""Spark's offset log (`<query checkpoint>/offsets/<batch id>`), read by the jobs and by the lag exporter.

Spark writes the file before the batch runs: the line `v1`, a JSON metadata line (`batchWatermarkMs`,
`batchTimestampMs`, conf), then one line per source of the query: its end offsets, JSON for a Kafka source
(`{"topic": {"partition": offset}}`), another JSON shape for other sources, or `-` for none yet. The jobs read
the end offsets a batch was planned with; the exporter reads the position of the last committed batch. Both
parse it here, so they cannot disagree on what a batch covered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

SUPPORTED_VERSION = "v1"

TopicPartition = tuple[str, int]


class OffsetLogError(ValueError):
    """The file is not an offset log this code can read; the message says where and why."""


@dataclass(frozen=True)
class OffsetLogEntry:
    """One batch's entry: its metadata and the end offsets (exclusive) of its Kafka sources."""

    metadata: Mapping[str, object]
    end_offsets: Mapping[TopicPartition, int] = field(default_factory=dict)

    @property
    def watermark_ms(self) -> int:
        value = self.metadata.get("batchWatermarkMs")
        if not isinstance(value, int):
            raise OffsetLogError("no batchWatermarkMs in the metadata line")
        return value

    def by_topic(self) -> dict[str, dict[str, int]]:
        """{topic: {partition: end offset}}, partitions as the strings Spark's Kafka options use."""
        offsets: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(self.end_offsets.items()):
            offsets.setdefault(topic, {})[str(partition)] = offset
        return offsets


def _is_kafka_offsets(value: object) -> bool:
    return (
        isinstance(value, dict)
        and bool(value)
        and all(
            isinstance(partitions, dict)
            and all(
                isinstance(key, str) and key.lstrip("-").isdigit() and isinstance(offset, int)
                for key, offset in partitions.items()
            )
            for partitions in value.values()
        )
    )


def parse_offset_log(text: str, where: str = "offsets file") -> OffsetLogEntry:
    """Parse one `offsets/<N>` file. When a query reads a partition through several sources, the lowest
    offset counts (what the query as a whole has covered)."""
    lines = text.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise OffsetLogError(f"{where}: empty")
    if lines[0] != SUPPORTED_VERSION:
        raise OffsetLogError(
            f"{where}: unsupported offset log version {lines[0][:20]!r} (this code reads {SUPPORTED_VERSION})"
        )
    if len(lines) < 3:
        raise OffsetLogError(f"{where}: incomplete (no metadata or source lines)")
    try:
        metadata = json.loads(lines[1])
    except json.JSONDecodeError as error:
        raise OffsetLogError(f"{where}: metadata line is not JSON ({error})") from None
    if not isinstance(metadata, dict):
        raise OffsetLogError(f"{where}: metadata line is not a JSON object")
    offsets: dict[TopicPartition, int] = {}
    for number, line in enumerate(lines[2:], start=3):
        if line.strip() == "-":
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise OffsetLogError(f"{where}: line {number} is not JSON ({error})") from None
        if not _is_kafka_offsets(value):
            continue  # another kind of source
        for topic, partitions in value.items():
            for partition_text, offset in partitions.items():
                partition = int(partition_text)
                if partition < 0 or offset < 0:
                    continue
                key = (topic, partition)
                offsets[key] = min(offset, offsets.get(key, offset))
    return OffsetLogEntry(metadata, offsets)

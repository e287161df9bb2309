"""Input records Kafka deleted before a query read them, told in one line: which topic and partition, which
offsets, and how to resume.

Spark's Kafka source with failOnDataLoss fails the query when retention (or delete-records) removed records
past its checkpoint, or when an input topic was deleted; its error names one batch's offset range, or for a
deleted topic only "This server does not host this topic-partition". The query's failure text also carries
the offsets it had committed, so comparing them with what Kafka keeps now gives the exact loss per partition.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Set
from dataclasses import dataclass

# What Spark's Kafka source says when it fails a query for lost input (failOnDataLoss).
_LOSS_MARKERS = ("Some data may have been lost", "UnknownTopicOrPartitionException", "have been deleted")
_COMMITTED = re.compile(r"^Current Committed Offsets: \{KafkaV2\[.*?\]\]: (\{.*\})\}\s*$", re.MULTILINE)
_SPARK_REASON = re.compile(r"^Reason: (.*)$", re.MULTILINE)
RUNBOOK = "monitoring/rules/README.md#streamstackconsumerdataloss"


@dataclass(frozen=True)
class LostRange:
    """Offsets `first` to `end - 1` of a partition are gone; `end` is None when the topic itself is gone."""

    topic: str
    partition: int
    first: int
    end: int | None

    def describe(self) -> str:
        if self.end is None:
            return f"topic {self.topic!r} was deleted: partition {self.partition} from offset {self.first}"
        return f"topic {self.topic!r} partition {self.partition}: offsets {self.first} to {self.end - 1}"


def is_data_loss(failure: str) -> bool:
    return any(marker in failure for marker in _LOSS_MARKERS)


def committed_offsets(failure: str) -> dict[str, dict[int, int]]:
    """The Kafka offsets the failed query had committed, from its failure text; empty when absent."""
    match = _COMMITTED.search(failure)
    if match is None:
        return {}
    by_topic: dict[str, dict[str, int]] = json.loads(match.group(1))
    return {topic: {int(p): offset for p, offset in offsets.items()} for topic, offsets in by_topic.items()}


def lost_ranges(
    committed: Mapping[str, Mapping[int, int]],
    existing_topics: Set[str],
    earliest: Mapping[tuple[str, int], int],
) -> list[LostRange]:
    """Where the query's next offset is below the earliest Kafka keeps, or its topic no longer exists."""
    lost = []
    for topic, partitions in sorted(committed.items()):
        for partition, next_offset in sorted(partitions.items()):
            if topic not in existing_topics:
                lost.append(LostRange(topic, partition, next_offset, None))
            elif earliest.get((topic, partition), 0) > next_offset:
                lost.append(LostRange(topic, partition, next_offset, earliest[(topic, partition)]))
    return lost


def explain_data_loss(failure: str, lost: list[LostRange]) -> str:
    """One line: what is lost (or Spark's reason when the comparison found nothing) and how to resume."""
    if lost:
        what = "; ".join(loss.describe() for loss in lost)
    else:
        reason = _SPARK_REASON.search(failure)
        what = reason.group(1).strip() if reason else "Spark reported data loss"
    return (
        f"input records are gone before this job read them (retention, delete-records or a deleted topic): "
        f"{what}. It fails the same way on every restart; to skip what is lost, run it once with "
        f"--accept-data-loss until a batch commits, then as before (runbook: {RUNBOOK})"
    )

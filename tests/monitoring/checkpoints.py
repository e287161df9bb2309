"""Write Spark Structured Streaming checkpoints in Spark's on-disk format (as Spark 4.3 writes them)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

KafkaOffsets = Mapping[str, Mapping[int, int]]


def _metadata_line(batch: int) -> str:
    return json.dumps(
        {
            "batchWatermarkMs": 0,
            "batchTimestampMs": 1_795_325_809_400 + batch * 1000,
            "conf": {
                "spark.sql.shuffle.partitions": "2",
                "spark.sql.streaming.multipleWatermarkPolicy": "min",
                "spark.sql.streaming.stateStore.providerClass": (
                    "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
                ),
            },
        },
        separators=(",", ":"),
    )


def offsets_text(batch: int, sources: Iterable[KafkaOffsets | None]) -> str:
    """`offsets/<batch>`: `v1`, the metadata line, one line per source (`-` for None); no final newline."""
    lines = ["v1", _metadata_line(batch)]
    for source in sources:
        if source is None:
            lines.append("-")
        else:
            lines.append(
                json.dumps(
                    {topic: {str(p): o for p, o in parts.items()} for topic, parts in source.items()},
                    separators=(",", ":"),
                )
            )
    return "\n".join(lines)


def write_batch(query: Path, batch: int, offsets: KafkaOffsets, committed: bool = True) -> None:
    """Write offsets/<batch> (and commits/<batch> when committed), with Spark's hidden .crc sidecars."""
    for name, text in (
        ("offsets", offsets_text(batch, [offsets])),
        *((("commits", 'v1\n{"nextBatchWatermarkMs":0}'),) if committed else ()),
    ):
        directory = query / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / str(batch)).write_text(text)
        (directory / f".{batch}.crc").write_bytes(b"crc\x00\x01")


def write_query_checkpoint(
    query: Path, batches: Mapping[int, KafkaOffsets], committed: Iterable[int]
) -> None:
    """A query checkpoint: `metadata`, `offsets/<N>` for every batch, `commits/<N>` for committed ones."""
    query.mkdir(parents=True, exist_ok=True)
    (query / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    (query / "offsets").mkdir(exist_ok=True)
    (query / "commits").mkdir(exist_ok=True)
    (query / "sources" / "0").mkdir(parents=True, exist_ok=True)
    done = set(committed)
    for batch, offsets in sorted(batches.items()):
        write_batch(query, batch, offsets, committed=batch in done)

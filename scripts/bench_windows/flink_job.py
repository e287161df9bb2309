"""The PyFlink peer's program; runs in the PyFlink venv (scripts/bench_windows/flink.py builds it and starts
this as a subprocess with PYTHONPATH at the repository, so `records.classify` is imported from it).

Each round is one Flink job on a local mini-cluster (streaming mode, parallelism --parallelism): the topic
from its earliest to its latest offsets (Flink's Kafka table source, `raw` format: the value's bytes and the
record's timestamp, bounded at the offsets it finds at start), into the DataStream API, where a Python `map`
applies `classify`; back into a table whose event time is the view's, with a watermark --grace-ms behind
the newest; Flink SQL counts the views per url in 10 s tumbling windows (TUMBLE, COUNT) and the dead
letters per reason. When the bounded source ends, the final watermark fires every window. Counts and
dead letters come back to this program through `collect`; one JSON line per round is appended to --out.

    python -m scripts.bench_windows.flink_job --bootstrap H:P --topic T --jar J --rounds N --grace-ms G \
        --out F
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from pyflink.common import Configuration, Row, RowKind, Types  # type: ignore[import-not-found]
from pyflink.datastream import (  # type: ignore[import-not-found]
    MapFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from pyflink.table import DataTypes, Schema, StreamTableEnvironment  # type: ignore[import-not-found]

from scripts.bench_windows.flink_sql import epoch_ms_of, interval
from scripts.bench_windows.records import WINDOW_MS, classify


class Classify(MapFunction):  # type: ignore[misc]
    """`classify` on (value, record timestamp); notes the wall time of its first record in `marks`."""

    def __init__(self, marks: str) -> None:
        self.marks, self.first = marks, True

    def map(self, row: Row) -> Row:
        if self.first:
            self.first = False
            Path(self.marks, f"first-{os.getpid()}-{uuid.uuid4().hex[:6]}").write_text(repr(time.time()))
        value, stamp = row[0], row[1]
        reason, event_ms, url = classify(None if value is None else bytes(value), epoch_ms(stamp))
        return Row(reason or "", event_ms, url)


def epoch_ms(stamp: Any) -> int:
    return int(stamp.to_epoch_milli()) if hasattr(stamp, "to_epoch_milli") else int(stamp.timestamp() * 1000)


def one_round(args: argparse.Namespace, marks: str) -> dict[str, Any]:
    config = Configuration()
    config.set_string("python.executable", sys.executable)  # the Python workers: this venv's
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    env.set_parallelism(args.parallelism)
    env.add_jars(Path(args.jar).resolve().as_uri())
    tables = StreamTableEnvironment.create(env)
    tables.get_config().set("table.local-time-zone", "UTC")
    group = f"bench-flink-{uuid.uuid4().hex[:8]}"
    tables.execute_sql(
        f"""
        CREATE TEMPORARY TABLE bench_source (
          `value` BYTES,
          `record_ms` TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL
        ) WITH (
          'connector' = 'kafka',
          'topic' = '{args.topic}',
          'properties.bootstrap.servers' = '{args.bootstrap}',
          'properties.group.id' = '{group}',
          'scan.startup.mode' = 'earliest-offset',
          'scan.bounded.mode' = 'latest-offset',
          'format' = 'raw'
        )"""
    )
    source = tables.to_data_stream(tables.sql_query("SELECT `value`, record_ms FROM bench_source"))
    classified = source.map(
        Classify(marks),
        output_type=Types.ROW_NAMED(
            ["reason", "event_ms", "url"], [Types.STRING(), Types.LONG(), Types.STRING()]
        ),
    )
    tables.create_temporary_view(
        "classified",
        tables.from_data_stream(
            classified,
            Schema.new_builder()
            .column("reason", DataTypes.STRING())
            .column("event_ms", DataTypes.BIGINT())
            .column("url", DataTypes.STRING())
            .column_by_expression("event_time", "TO_TIMESTAMP_LTZ(event_ms, 3)")
            .watermark("event_time", f"event_time - {interval(args.grace_ms)}")
            .build(),
        ),
    )
    tables.execute_sql("CREATE TEMPORARY VIEW page_views AS SELECT * FROM classified WHERE reason = ''")
    # The views' counts per (window start, url) and the dead letters' per reason, in one job; the window
    # counts are final rows, the dead letters' count is updated at each (the last update is the total).
    query = f"""
        SELECT 'view' AS kind, url AS key, COUNT(*) AS n,
               CAST(window_start AS STRING) AS window_start
        FROM TABLE(TUMBLE(TABLE page_views, DESCRIPTOR(event_time), {interval(WINDOW_MS)}))
        GROUP BY window_start, window_end, url
        UNION ALL
        SELECT 'dead' AS kind, reason AS key, COUNT(*) AS n, CAST(NULL AS STRING) AS window_start
        FROM classified WHERE reason <> '' GROUP BY reason
    """
    result: dict[str, Any] = {"counts": [], "dead_letters": {}}
    with tables.sql_query(query).execute().collect() as rows:
        for row in rows:
            if row.get_row_kind() not in (RowKind.INSERT, RowKind.UPDATE_AFTER):
                continue
            kind, key, n, start = row
            if kind == "dead":
                result["dead_letters"][key] = n
            else:
                result["counts"].append([epoch_ms_of(start), key, n])
    result["last_counted"] = time.time()
    firsts = [float(p.read_text()) for p in Path(marks).glob("first-*")]
    if not firsts:
        raise RuntimeError(f"{args.topic}: the job saw no record")
    result["first_record"] = min(firsts)
    result["records"] = sum(n for _, _, n in result["counts"]) + sum(result["dead_letters"].values())
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--jar", required=True)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--grace-ms", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="a JSON line per round is appended here")
    args = parser.parse_args(argv)
    for number in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="bench-flink-") as marks:
            result = one_round(args, marks)
        result["round"] = number
        with args.out.open("a") as out:
            out.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

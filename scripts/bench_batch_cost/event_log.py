"""Where a micro-batch's Spark jobs spend their time, from Spark's event log of a benchmark driver
(`--event-log DIR` writes one per variant: DIR/<n>-<variant>/).

Per data batch of each query (a batch whose tasks read input records): the wall time of its jobs, from a
job's start to its first task's launch, and the tasks' run time, CPU time and deserialization time, summed
over its tasks. Run time less CPU time is what the tasks spent waiting: for Kafka, or for a core. The medians
of the last --batches data batches of each query are printed.

    .venv/bin/python -m scripts.bench_batch_cost --only best --warmup 200 --batches 20 --event-log /tmp/ev
    .venv/bin/python -m scripts.bench_batch_cost.event_log /tmp/ev/00-baseline --batches 20
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_EVENTS_FILE = re.compile(r"events_(\d+)_")
# A streaming batch's jobs carry the query's name and the batch in their description (StreamExecution).
_DESCRIPTION = re.compile(r"\A(?P<query>[^\n]*)\n.*^batch = (?P<batch>\d+)\Z", re.S | re.M)


def event_files(path: Path) -> list[Path]:
    """An event log's files in order: `path` itself, or the `events_<n>_*` files under it (Spark's rolling
    event log writes one folder per application)."""
    if path.is_file():
        return [path]
    numbered = [
        (int(matched.group(1)), file)
        for file in path.rglob("events_*")
        if (matched := _EVENTS_FILE.match(file.name))
    ]
    if not numbered:
        raise FileNotFoundError(f"no Spark event log (events_*) under {path}")
    return [file for _number, file in sorted(numbered)]


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """The events of an uncompressed event log (the benchmark turns compression off); a line cut by a
    driver still writing is left out."""
    for file in event_files(path):
        with file.open(encoding="utf-8") as lines:
            for line in lines:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue


@dataclass
class BatchJobs:
    """One micro-batch of one query: its jobs' wall time and its tasks' times (ms)."""

    query: str
    batch: int
    jobs_ms: float = 0.0
    to_first_task_ms: float = 0.0
    tasks: int = 0
    records_read: int = 0
    run_ms: float = 0.0
    cpu_ms: float = 0.0
    deserialize_ms: float = 0.0

    @property
    def waiting_ms(self) -> float:
        return self.run_ms - self.cpu_ms


def batches(events: Iterable[dict[str, Any]]) -> list[BatchJobs]:
    """Each streaming batch's jobs and tasks, in the order the batches started."""
    by_key: dict[tuple[str, int], BatchJobs] = {}
    batch_of_job: dict[int, BatchJobs] = {}
    batch_of_stage: dict[int, BatchJobs] = {}
    job_started: dict[int, float] = {}
    first_launch: dict[int, float] = {}
    job_of_stage: dict[int, int] = {}
    for event in events:
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            matched = _DESCRIPTION.match(event.get("Properties", {}).get("spark.job.description") or "")
            if matched is None:
                continue
            key = (matched["query"], int(matched["batch"]))
            batch = by_key.setdefault(key, BatchJobs(*key))
            job_id = event["Job ID"]
            batch_of_job[job_id] = batch
            job_started[job_id] = event["Submission Time"]
            for stage in event["Stage IDs"]:
                batch_of_stage[stage] = batch
                job_of_stage[stage] = job_id
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in batch_of_job:
            job_id = event["Job ID"]
            batch = batch_of_job[job_id]
            batch.jobs_ms += event["Completion Time"] - job_started[job_id]
            if job_id in first_launch:
                batch.to_first_task_ms += first_launch[job_id] - job_started[job_id]
        elif kind == "SparkListenerTaskEnd" and event["Stage ID"] in batch_of_stage:
            batch = batch_of_stage[event["Stage ID"]]
            job_id = job_of_stage[event["Stage ID"]]
            launched = event["Task Info"]["Launch Time"]
            first_launch[job_id] = min(first_launch.get(job_id, launched), launched)
            metrics = event.get("Task Metrics") or {}
            batch.tasks += 1
            batch.run_ms += metrics.get("Executor Run Time", 0)
            batch.cpu_ms += metrics.get("Executor CPU Time", 0) / 1e6
            batch.deserialize_ms += metrics.get("Executor Deserialize Time", 0)
            batch.records_read += (metrics.get("Input Metrics") or {}).get("Records Read", 0)
    return list(by_key.values())


def report(measured: Sequence[BatchJobs], last: int) -> str:
    """Medians per query over its last `last` data batches."""
    lines = [
        "| query | data batches | jobs ms | job start to first task ms | tasks | task run ms | task CPU ms "
        "| waiting (run - CPU) ms | deserialize ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for query in dict.fromkeys(batch.query for batch in measured):
        data = [batch for batch in measured if batch.query == query and batch.records_read > 0][-last:]
        if not data:
            continue

        def median(values: Iterable[float]) -> str:
            return f"{statistics.median(values):.1f}"

        lines.append(
            f"| {query} | {len(data)} | {median(b.jobs_ms for b in data)} "
            f"| {median(b.to_first_task_ms for b in data)} | {median(b.tasks for b in data)} "
            f"| {median(b.run_ms for b in data)} | {median(b.cpu_ms for b in data)} "
            f"| {median(b.waiting_ms for b in data)} | {median(b.deserialize_ms for b in data)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench-batch-cost-event-log", description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="a variant's event log folder (or one events_* file)")
    parser.add_argument("--batches", type=int, default=20, help="the last data batches of each query")
    args = parser.parse_args(argv)
    print(report(batches(read_events(args.path)), args.batches))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Per-batch durations from Structured Streaming progress, their summaries and the markdown tables: no I/O.

A progress is Spark's `StreamingQueryProgress` as JSON (a dict): `batchId`, `numInputRows`, `timestamp` and
`durationMs` per phase. A data batch read at least one record; a no-data batch (`numInputRows` 0) only runs
for a stateful query whose watermark moved (`spark.sql.streaming.noDataMicroBatches.enabled`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from scripts.stats import percentile

TRIGGER = "triggerExecution"
PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
"""The phases of a micro-batch that Spark times, trigger to commit; `triggerExecution` is all of them."""


class Batch(NamedTuple):
    """One micro-batch of one query, from its progress."""

    batch_id: int
    input_rows: int
    timestamp: str
    durations_ms: dict[str, int]

    @classmethod
    def of(cls, progress: Mapping[str, Any]) -> Batch:
        return cls(
            batch_id=int(progress["batchId"]),
            input_rows=int(progress.get("numInputRows") or 0),
            timestamp=str(progress.get("timestamp", "")),
            durations_ms={name: int(ms) for name, ms in (progress.get("durationMs") or {}).items()},
        )

    @property
    def has_data(self) -> bool:
        return self.input_rows > 0


def measured_batches(
    progresses: Iterable[Mapping[str, Any]], warmup: int, count: int
) -> tuple[list[Batch], list[Batch]]:
    """The data batches after the first `warmup` data batches, at most `count`, and the no-data batches
    among them (after the first measured data batch, before the last). Progresses may repeat (Spark reports
    a batch once, but a reader may see it twice) and arrive out of order: one per batch id, in order."""
    by_id = {batch.batch_id: batch for batch in map(Batch.of, progresses)}
    ordered = [by_id[batch_id] for batch_id in sorted(by_id)]
    data_seen = 0
    data: list[Batch] = []
    no_data: list[Batch] = []
    pending_no_data: list[Batch] = []
    for batch in ordered:
        if len(data) == count:
            break
        if not batch.has_data:
            if data:
                pending_no_data.append(batch)
            continue
        data_seen += 1
        if data_seen > warmup:
            data.append(batch)
            no_data.extend(pending_no_data)
        pending_no_data = []
    return data, no_data


@dataclass(frozen=True)
class Spread:
    """Median and 90th percentile in milliseconds."""

    median: float
    p90: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        return cls(percentile(values, 50), percentile(values, 90)) if values else None


@dataclass(frozen=True)
class QuerySummary:
    """A query's measured data batches: triggerExecution and each phase (median, p90), the input rows per
    batch, and how many no-data batches ran among them."""

    batches: int
    no_data_batches: int
    input_rows_median: float | None
    trigger: Spread | None
    phases: dict[str, Spread] = field(default_factory=dict)
    no_data_trigger: Spread | None = None

    def dominant_phases(self, top: int = 2) -> list[tuple[str, float]]:
        """The phases with the largest medians, largest first (ties by name)."""
        ranked = sorted(self.phases.items(), key=lambda item: (-item[1].median, item[0]))
        return [(name, spread.median) for name, spread in ranked[:top]]


def summarize(progresses: Iterable[Mapping[str, Any]], warmup: int, count: int) -> QuerySummary:
    data, no_data = measured_batches(progresses, warmup, count)
    phases: dict[str, Spread] = {}
    for name in PHASES:
        values = [float(batch.durations_ms[name]) for batch in data if name in batch.durations_ms]
        if (spread := Spread.of(values)) is not None:
            phases[name] = spread
    return QuerySummary(
        batches=len(data),
        no_data_batches=len(no_data),
        input_rows_median=statistics.median(b.input_rows for b in data) if data else None,
        trigger=Spread.of([float(b.durations_ms.get(TRIGGER, 0)) for b in data]),
        phases=phases,
        no_data_trigger=Spread.of([float(b.durations_ms.get(TRIGGER, 0)) for b in no_data]),
    )


# -- the table -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """One query kind (stateless or stateful) under one variant: its summary, or why there is none."""

    summary: QuerySummary | None = None
    error: str | None = None  # Spark's message: what it refused, or why the run failed
    refused: bool = False  # Spark refused the settings when the query started
    skipped: str | None = None  # why the variant does not run this kind


@dataclass(frozen=True)
class Row:
    variant: str
    settings: str
    stateless: Outcome
    stateful: Outcome
    load_before: float
    load_after: float
    # Driver JVM CPU seconds per trigger interval, of the stateless and of the stateful run.
    jvm_cpu_per_trigger: tuple[float | None, float | None] = (None, None)
    others_cores: float | None = None  # cores the rest of the machine used meanwhile (the most of the runs)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _spread(outcome: Outcome) -> str:
    if outcome.skipped is not None:
        return "n/a"
    if outcome.error is not None:
        return "refused" if outcome.refused else "failed"
    summary = outcome.summary
    if summary is None or summary.trigger is None:
        return "no batches"
    return f"{_ms(summary.trigger.median)} / {_ms(summary.trigger.p90)}"


def _dominant(outcome: Outcome) -> str:
    if outcome.summary is None or outcome.summary.trigger is None:
        return "-"
    return ", ".join(f"{name} {_ms(ms)}" for name, ms in outcome.summary.dominant_phases())


def markdown(rows: Sequence[Row], goals: tuple[float, float] = (100.0, 200.0)) -> str:
    """One row per variant: triggerExecution median / p90 (ms) of the stateless and the stateful query, the
    two largest phases (median ms) of each, the driver JVM's CPU per trigger and the load average."""
    stateless_goal, stateful_goal = goals
    lines = [
        f"| variant | stateless trigger median / p90 ms (goal {stateless_goal:.0f}) "
        f"| stateful trigger median / p90 ms (goal {stateful_goal:.0f}) | stateless dominant phases "
        "| stateful dominant phases | JVM CPU s / trigger (stateless; stateful) | other load, cores "
        "| load 1m before → after | settings |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        stateless_cpu, stateful_cpu = row.jvm_cpu_per_trigger
        lines.append(
            f"| {row.variant} | {_spread(row.stateless)} | {_spread(row.stateful)} "
            f"| {_dominant(row.stateless)} | {_dominant(row.stateful)} "
            f"| {_number(stateless_cpu)}; {_number(stateful_cpu)} | {_number(row.others_cores)} "
            f"| {row.load_before:.2f} → {row.load_after:.2f} | {row.settings} |"
        )
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class MultiRow:
    """Several queries in one driver: each query's triggerExecution and the driver JVM's CPU."""

    variant: str
    queries: dict[str, QuerySummary]
    jvm_cpu_per_trigger: float | None
    load_before: float
    load_after: float
    others_cores: float | None = None
    error: str | None = None


def multi_markdown(rows: Sequence[MultiRow]) -> str:
    """One row per variant and query: median / p90 triggerExecution (ms) and data batches measured; per
    variant the JVM's CPU seconds per trigger interval, the other load and the load average."""
    lines = [
        "| variant | query | trigger median / p90 ms | data batches | JVM CPU s / trigger "
        "| other load, cores | load 1m before → after |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        shared = (
            f"{_number(row.jvm_cpu_per_trigger)} | {_number(row.others_cores)} "
            f"| {row.load_before:.2f} → {row.load_after:.2f}"
        )
        if row.error is not None:
            lines.append(f"| {row.variant} | - | failed: {row.error.splitlines()[0][:80]} | - | {shared} |")
            continue
        for name, summary in row.queries.items():
            spread = _spread(Outcome(summary=summary))
            lines.append(f"| {row.variant} | {name} | {spread} | {summary.batches} | {shared} |")
    return "\n".join(lines) + "\n"

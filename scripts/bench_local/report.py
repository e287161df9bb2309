"""The benchmark's samples, their evaluation against the goals, and the markdown table: no I/O."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

LAG_SOURCES = ("checkpoint", "shadow")
"""The two ways the lag exporter reads a Spark query: its checkpoint and its shadow group."""

MACHINE = "machine"
"""The CPU entry of every process on the machine, the stack's and others'."""


@dataclass(frozen=True)
class Goals:
    """Issue 16's goals for the local stack at its defaults."""

    max_utilization: float = 0.7
    max_lag_seconds: float = 15.0


@dataclass(frozen=True)
class QuerySample:
    """One query over one sample interval. The gauges change once per batch and are scraped every 2 s, so
    the interval's max and mean cover every batch in it, not only the one running at the sample."""

    utilization: float | None = None  # at the sample
    utilization_max: float | None = None
    utilization_mean: float | None = None
    lag_max_seconds: dict[str, float] = field(default_factory=dict)  # by source (LAG_SOURCES)
    input_rows_per_second: float | None = None
    phase_mean_seconds: dict[str, float] = field(default_factory=dict)  # Spark's durationMs, per phase


@dataclass(frozen=True)
class Alert:
    name: str
    state: str  # pending or firing
    labels: dict[str, str] = field(default_factory=dict)  # the others, without alertname and alertstate

    @property
    def target(self) -> str:
        """What it is about: a query, else a consumer group (or checkpoint), else a scrape target."""
        return self.labels.get("query") or self.labels.get("group") or self.labels.get("instance") or "-"


@dataclass(frozen=True)
class Sample:
    """Everything read at one sample: the interval it covers ends at `at`."""

    at: float  # unix time
    elapsed_seconds: float  # since every job was running
    interval_seconds: float
    load_average: tuple[float, float, float]
    queries: dict[str, QuerySample]
    alerts: tuple[Alert, ...] = ()  # pending or firing at any evaluation in the interval
    cpu_cores: dict[str, float] = field(default_factory=dict)  # per process of the stack, and "machine"
    errors: tuple[str, ...] = ()  # Prometheus queries that failed


@dataclass(frozen=True)
class QueryResult:
    query: str
    samples: int  # samples with a utilization
    utilization_max: float | None
    utilization_mean: float | None
    lag_max_seconds: dict[str, float | None]  # by source
    utilization_ok: bool
    lag_ok: bool

    @property
    def passed(self) -> bool:
        return self.utilization_ok and self.lag_ok


@dataclass(frozen=True)
class AlertSeen:
    """An alert in one state, over all its label sets (partitions, topics, ...)."""

    name: str
    state: str
    targets: tuple[str, ...]
    samples: int  # in how many sample intervals it was pending (or firing) for any target


@dataclass(frozen=True)
class Evaluation:
    goals: Goals
    samples: int
    queries: tuple[QueryResult, ...]
    alerts: tuple[AlertSeen, ...]
    load_average_1m_mean: float | None
    load_average_1m_max: float | None
    load_average_at_end: tuple[float, float, float] | None
    cpu_cores_mean: dict[str, float]

    @property
    def utilization_ok(self) -> bool:
        return bool(self.queries) and all(query.utilization_ok for query in self.queries)

    @property
    def lag_ok(self) -> bool:
        return bool(self.queries) and all(query.lag_ok for query in self.queries)

    @property
    def alerts_ok(self) -> bool:
        return not self.alerts

    @property
    def passed(self) -> bool:
        return self.utilization_ok and self.lag_ok and self.alerts_ok


def _max(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return max(present) if present else None


def _mean(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.fmean(present) if present else None


def evaluate(samples: Sequence[Sample], goals: Goals) -> Evaluation:
    """Per query over all samples: the highest and the mean utilization (the mean of the intervals' means:
    they are equally long) and the highest lag of each source. A query fails a goal it has no data for."""
    names = sorted({name for sample in samples for name in sample.queries})
    results = []
    for name in names:
        seen = [sample.queries[name] for sample in samples if name in sample.queries]
        utilization_max = _max(query.utilization_max for query in seen)
        lags = {source: _max(query.lag_max_seconds.get(source) for query in seen) for source in LAG_SOURCES}
        results.append(
            QueryResult(
                query=name,
                samples=sum(1 for query in seen if query.utilization_max is not None),
                utilization_max=utilization_max,
                utilization_mean=_mean(query.utilization_mean for query in seen),
                lag_max_seconds=lags,
                utilization_ok=utilization_max is not None and utilization_max <= goals.max_utilization,
                lag_ok=all(lag is not None and lag <= goals.max_lag_seconds for lag in lags.values()),
            )
        )
    targets: dict[tuple[str, str], set[str]] = {}
    seen_in: dict[tuple[str, str], int] = {}
    for sample in samples:
        for key in {(alert.name, alert.state) for alert in sample.alerts}:
            seen_in[key] = seen_in.get(key, 0) + 1
        for alert in sample.alerts:
            targets.setdefault((alert.name, alert.state), set()).add(alert.target)
    processes = sorted({name for sample in samples for name in sample.cpu_cores})
    return Evaluation(
        goals=goals,
        samples=len(samples),
        queries=tuple(results),
        alerts=tuple(
            AlertSeen(name, state, tuple(sorted(targets[name, state])), seen_in[name, state])
            for name, state in sorted(seen_in)
        ),
        load_average_1m_mean=_mean(sample.load_average[0] for sample in samples),
        load_average_1m_max=_max(sample.load_average[0] for sample in samples),
        load_average_at_end=samples[-1].load_average if samples else None,
        cpu_cores_mean={
            name: statistics.fmean(sample.cpu_cores.get(name, 0.0) for sample in samples)
            for name in processes
        },
    )


def _number(value: float | None, digits: int, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _verdict(ok: bool) -> str:
    return "pass" if ok else "FAIL"


def markdown(evaluation: Evaluation) -> str:
    """One row per query, then each goal with its verdict, the alerts seen, the load and CPU by process."""
    goals = evaluation.goals
    lines = [
        "| query | utilization max | utilization mean | lag max (checkpoint) | lag max (shadow) | result |",
        "|---|---|---|---|---|---|",
    ]
    for query in evaluation.queries:
        failed = [
            what for what, ok in (("utilization", query.utilization_ok), ("lag", query.lag_ok)) if not ok
        ]
        lines.append(
            f"| {query.query} | {_number(query.utilization_max, 2)} | {_number(query.utilization_mean, 2)} | "
            + " | ".join(_number(query.lag_max_seconds[source], 1, " s") for source in LAG_SOURCES)
            + f" | {'FAIL: ' + ', '.join(failed) if failed else 'pass'} |"
        )
    worst_utilization = _max(query.utilization_max for query in evaluation.queries)
    worst_lag = _max(lag for query in evaluation.queries for lag in query.lag_max_seconds.values())
    lines += [
        "",
        f"- every query's utilization <= {goals.max_utilization:g}: {_verdict(evaluation.utilization_ok)} "
        f"(highest {_number(worst_utilization, 2)})",
        f"- every lag (checkpoint and shadow group) <= {goals.max_lag_seconds:g} s: "
        f"{_verdict(evaluation.lag_ok)} (highest {_number(worst_lag, 1, ' s')})",
        f"- no alert pending or firing: {_verdict(evaluation.alerts_ok)}"
        + (f" ({len(evaluation.alerts)} seen)" if evaluation.alerts else ""),
    ]
    lines += [
        f"  - {seen.name} {seen.state} in {seen.samples} of {evaluation.samples} samples: "
        + ", ".join(seen.targets)
        for seen in evaluation.alerts
    ]
    if evaluation.load_average_at_end is not None:
        one, five, fifteen = evaluation.load_average_at_end
        lines.append(
            f"- load average (1 min) over the samples: mean {_number(evaluation.load_average_1m_mean, 2)}, "
            f"max {_number(evaluation.load_average_1m_max, 2)}; at the end {one:.2f} / {five:.2f} / "
            f"{fifteen:.2f} (1 / 5 / 15 min)"
        )
    cpu = dict(evaluation.cpu_cores_mean)
    if MACHINE in cpu:
        machine = cpu.pop(MACHINE)
        busiest = sorted(cpu.items(), key=lambda item: -item[1])
        lines.append(
            f"- CPU, mean cores used: {machine:.2f} in all = "
            + " + ".join(f"{name} {cores:.2f}" for name, cores in busiest)
            + f" + everything else {max(0.0, machine - sum(cpu.values())):.2f}"
        )
    return "\n".join(lines) + "\n"

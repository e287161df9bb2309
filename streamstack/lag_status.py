"""`streamstack status`: one table of jobs (Spark queries) and consumer groups with their lag, status and
backpressure, read from the lag exporter's and the jobs' Prometheus endpoints.

    streamstack status [--json]                                   the local stack (from its state.json)
    streamstack status --exporter-url http://host:9308/metrics \\
        [--job-metrics-url http://driver:9401/metrics ...] [--json]  any exporter, any jobs

Where each column comes from:
- The lag exporter (`streamstack_lag_*`, see monitoring/README.md) gives one row per consumer it reads,
  `(source, group)`: LAG is `group_records` (records, summed over partitions), LAG SECONDS is
  `group_max_seconds` (the oldest unprocessed record of any partition), STATUS the Burrow group status
  (OK, WARN, ERR) from `group_status_code`; an ERR names the worst partition status behind it (STOP, STALL or
  REWIND, from `status_code`), e.g. `ERR (STALL)`.
- A row is a job when its source is a shadow group (`<shadow prefix><query>`) or a Spark checkpoint (label
  `<name>/<query>`, or `<name>` for a single query checkpoint): NAME is the query name, so a query the
  exporter sees both ways shows twice, once per SOURCE. Other consumer groups are `group` rows.
- Backpressure comes from the jobs' own endpoints (`streamstack_query_*{query}`), joined by query name:
  UTILIZATION (trigger execution time / trigger interval, above 1 the query falls behind), RATE LIMITED (the
  last batch stopped short of the latest offsets because of maxOffsetsPerTrigger), WATERMARK DELAY (how far
  the watermark trails the batch time; only for queries with a watermark). A query a job reports that the
  exporter does not know gets a row of its own with no lag (SOURCE `-`).

Below the table, the CDC source (streamstack/source_status.py): the replication slot's source lag (bytes and
seconds), whether it is active, and the connector's and its tasks' state with Debezium's milliseconds behind
source, from `--connect-metrics-url` (locally Kafka Connect's JMX exporter, from the state file).

Errors are one line and exit 1: an unreachable URL, or one that serves no streamstack metrics. In local mode a
job endpoint that does not answer (a job starting or gone) is reported under the table instead.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from contracts import metrics
from contracts.shadow_groups import SHADOW_GROUP_PREFIX
from streamstack import source_status
from streamstack.errors import StreamstackError
from streamstack.local.stack import require_running_state
from streamstack.paths import default_workdir

GROUP_STATUS_NAMES = {metrics.STATUS_CODES[name]: name for name in metrics.GROUP_STATUSES}
PARTITION_STATUS_NAMES = {metrics.STATUS_CODES[name]: name for name in metrics.PARTITION_STATUSES}

Samples = list[tuple[str, dict[str, str], float]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--exporter-url",
        default=None,
        metavar="URL",
        help="the lag exporter's /metrics (default: the local stack's, from its state file)",
    )
    parser.add_argument(
        "--job-metrics-url",
        action="append",
        default=None,
        metavar="URL",
        help="a job's /metrics, for backpressure (repeatable; without --exporter-url: the local jobs')",
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="the local stack's (default .streamstack/)"
    )
    parser.add_argument(
        "--shadow-prefix",
        default=SHADOW_GROUP_PREFIX,
        help=f"group id prefix of the jobs' shadow groups (default {SHADOW_GROUP_PREFIX})",
    )
    parser.add_argument(
        "--connect-metrics-url",
        default=None,
        metavar="URL",
        help="Kafka Connect's /metrics (its JMX exporter), for the CDC connector's state (local: state file)",
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for each endpoint")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


@dataclass(frozen=True)
class Endpoints:
    exporter_url: str
    job_metrics_urls: tuple[str, ...]
    strict_jobs: bool  # an unreachable job endpoint is an error (given on the command line) or a note (local)
    connect_metrics_url: str | None = None


def endpoints_from_args(args: argparse.Namespace) -> Endpoints:
    job_urls = tuple(args.job_metrics_url or ())
    if args.exporter_url is not None:
        return Endpoints(
            args.exporter_url, job_urls, strict_jobs=True, connect_metrics_url=args.connect_metrics_url
        )
    if job_urls:
        raise StreamstackError(
            "--job-metrics-url needs --exporter-url (locally both come from the state file)"
        )
    state = require_running_state((args.workdir or default_workdir()).resolve())
    exporter = state.get("exporter")
    if not exporter:
        raise StreamstackError("the local stack runs no lag exporter (its state file names none)")
    local_jobs = tuple(job["metrics_url"] for job in state.get("jobs", []))
    connect_url = args.connect_metrics_url or (state.get("cdc") or {}).get("connect_metrics_url")
    return Endpoints(
        str(exporter["metrics_url"]), local_jobs, strict_jobs=False, connect_metrics_url=connect_url
    )


def fetch_samples(url: str, prefix: str, flag: str, timeout: float) -> Samples:
    """The samples of `url` whose names start with `prefix`; StreamstackError (one line, naming the flag and
    the URL) when it does not answer or serves no metric family with that prefix."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as error:
        raise StreamstackError(f"{flag} {url}: HTTP {error.code} {error.reason}") from None
    except urllib.error.URLError as error:
        raise StreamstackError(f"{flag} {url}: unreachable ({error.reason})") from None
    except (OSError, ValueError) as error:  # timeouts, resets, a malformed URL
        raise StreamstackError(f"{flag} {url}: unreachable ({error})") from None
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as error:  # the parser raises several types on text that is not Prometheus' format
        raise StreamstackError(f"{flag} {url}: not Prometheus metrics ({error})") from None
    ours = [family for family in families if family.name.startswith(prefix)]
    if not ours:
        raise StreamstackError(f"{flag} {url}: serves no {prefix}* metrics")
    return [(sample.name, dict(sample.labels), sample.value) for family in ours for sample in family.samples]


@dataclass(frozen=True)
class ExporterState:
    url: str
    up: bool
    stale: bool
    last_success_timestamp_seconds: float | None
    unreadable_checkpoints: tuple[str, ...] = ()  # group labels of checkpoints it could not read


@dataclass(frozen=True)
class ConsumerLag:
    """One consumer the exporter reads: a group, a shadow group or a checkpoint."""

    source: str
    group: str
    topics: tuple[str, ...]
    lag_records: int
    lag_seconds: float
    status: str
    worst_partition_status: str


def parse_exporter(url: str, samples: Samples) -> tuple[ExporterState, list[ConsumerLag]]:
    def single(name: str) -> float | None:
        values = [value for sample_name, _, value in samples if sample_name == metrics.LAG_PREFIX + name]
        return values[0] if values else None

    last_success = single(metrics.EXPORTER_LAST_SUCCESS)
    unreadable = sorted(
        labels["group"]
        for name, labels, value in samples
        if name == metrics.LAG_PREFIX + metrics.CHECKPOINT_READABLE and value == 0 and "group" in labels
    )
    health = ExporterState(
        url=url,
        up=single(metrics.EXPORTER_UP) == 1,
        stale=single(metrics.EXPORTER_STALE) == 1,
        last_success_timestamp_seconds=last_success if last_success else None,
        unreadable_checkpoints=tuple(unreadable),
    )
    per_group: dict[tuple[str, str], dict[str, Any]] = {}
    for name, labels, value in samples:
        if "source" not in labels or "group" not in labels:
            continue
        entry = per_group.setdefault((labels["source"], labels["group"]), {"topics": set(), "worst": 1})
        metric = name.removeprefix(metrics.LAG_PREFIX)
        if metric == metrics.GROUP_RECORDS:
            entry["lag"] = int(value)
        elif metric == metrics.GROUP_MAX_SECONDS:
            entry["seconds"] = value
        elif metric == metrics.GROUP_STATUS_CODE:
            entry["status"] = GROUP_STATUS_NAMES.get(int(value), str(int(value)))
        elif metric == metrics.STATUS_CODE:
            entry["topics"].add(labels["topic"])
            entry["worst"] = max(entry["worst"], int(value))
    consumers = [
        ConsumerLag(
            source=source,
            group=group,
            topics=tuple(sorted(entry["topics"])),
            lag_records=entry["lag"],
            lag_seconds=entry.get("seconds", 0.0),
            status=entry.get("status", "OK"),
            worst_partition_status=PARTITION_STATUS_NAMES.get(entry["worst"], str(entry["worst"])),
        )
        for (source, group), entry in sorted(per_group.items())
        if "lag" in entry  # a group's own row; skips per-partition-only label sets
    ]
    return health, consumers


@dataclass(frozen=True)
class Backpressure:
    """What a job reports about one query."""

    query: str
    state: str  # running, stopped, failed
    batch_utilization: float | None = None
    rate_limited: bool | None = None
    watermark_delay_seconds: float | None = None
    freshness_seconds: float | None = None  # commit in the database -> output (CDC-fed jobs only)


def parse_job(samples: Samples) -> list[Backpressure]:
    by_query: dict[str, dict[str, float]] = {}
    for name, labels, value in samples:
        if "query" in labels:
            by_query.setdefault(labels["query"], {})[name.removeprefix(metrics.QUERY_PREFIX)] = value
    result = []
    for query, values in sorted(by_query.items()):
        failed, active = values.get(metrics.QUERY_FAILED) == 1, values.get(metrics.QUERY_ACTIVE) == 1
        rate_limited = values.get(metrics.RATE_LIMITED)
        result.append(
            Backpressure(
                query=query,
                state="failed" if failed else ("running" if active else "stopped"),
                batch_utilization=values.get(metrics.BATCH_UTILIZATION),
                rate_limited=None if rate_limited is None else rate_limited == 1,
                watermark_delay_seconds=values.get(metrics.WATERMARK_DELAY_SECONDS),
                freshness_seconds=values.get(metrics.FRESHNESS_SECONDS),
            )
        )
    return result


@dataclass(frozen=True)
class StatusRow:
    kind: str  # job or group
    name: str  # the query name of a job, the group id of a group
    source: str  # checkpoint, shadow, group, or - (known only from the job's endpoint)
    group: str | None  # the exporter's `group` label
    topics: tuple[str, ...] = ()
    lag_records: int | None = None
    lag_seconds: float | None = None
    status: str | None = None  # OK, WARN, ERR
    worst_partition_status: str | None = None  # OK, WARN, STOP, STALL, REWIND
    job_state: str | None = None
    batch_utilization: float | None = None
    rate_limited: bool | None = None
    watermark_delay_seconds: float | None = None
    freshness_seconds: float | None = None

    @property
    def status_text(self) -> str:
        if self.status is None:
            return "-"
        if self.status == "ERR" and self.worst_partition_status not in (None, "OK", "WARN"):
            return f"ERR ({self.worst_partition_status})"
        return self.status


def query_of(consumer: ConsumerLag, shadow_prefix: str) -> str | None:
    """The query a consumer belongs to: a shadow group's id without the prefix, a checkpoint label's last
    part; None for an ordinary group."""
    if consumer.source == "shadow":
        return consumer.group.removeprefix(shadow_prefix)
    if consumer.source == "checkpoint":
        return consumer.group.rsplit("/", 1)[-1]
    return None


def build_rows(
    consumers: Iterable[ConsumerLag], backpressure: Iterable[Backpressure], shadow_prefix: str
) -> list[StatusRow]:
    by_query = {entry.query: entry for entry in backpressure}
    seen: set[str] = set()
    jobs: list[StatusRow] = []
    groups: list[StatusRow] = []
    for consumer in consumers:
        query = query_of(consumer, shadow_prefix)
        pressure = by_query.get(query) if query is not None else None
        if query is not None:
            seen.add(query)
        row = StatusRow(
            kind="group" if query is None else "job",
            name=consumer.group if query is None else query,
            source=consumer.source,
            group=consumer.group,
            topics=consumer.topics,
            lag_records=consumer.lag_records,
            lag_seconds=consumer.lag_seconds,
            status=consumer.status,
            worst_partition_status=consumer.worst_partition_status,
            **_pressure_fields(pressure),
        )
        (groups if query is None else jobs).append(row)
    for query, pressure in by_query.items():
        if query not in seen:
            jobs.append(
                StatusRow(kind="job", name=query, source="-", group=None, **_pressure_fields(pressure))
            )
    jobs.sort(key=lambda row: (row.name, row.source))
    groups.sort(key=lambda row: row.name)
    return [*jobs, *groups]


def _pressure_fields(pressure: Backpressure | None) -> dict[str, Any]:
    if pressure is None:
        return {}
    return {
        "job_state": pressure.state,
        "batch_utilization": pressure.batch_utilization,
        "rate_limited": pressure.rate_limited,
        "watermark_delay_seconds": pressure.watermark_delay_seconds,
        "freshness_seconds": pressure.freshness_seconds,
    }


@dataclass(frozen=True)
class StatusReport:
    exporter: ExporterState
    rows: list[StatusRow]
    unreachable_jobs: list[str] = field(default_factory=list)  # local mode: "url: reason"
    slots: list[source_status.SlotStatus] = field(default_factory=list)
    connectors: list[source_status.ConnectorStatus] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "exporter": {
                **asdict(self.exporter),
                "unreadable_checkpoints": list(self.exporter.unreadable_checkpoints),
            },
            "rows": [{**asdict(row), "topics": list(row.topics)} for row in self.rows],
            "unreachable_job_endpoints": self.unreachable_jobs,
            "source_slots": [asdict(slot) for slot in self.slots],
            "connectors": [
                {**asdict(connector), "tasks": [list(task) for task in connector.tasks]}
                for connector in self.connectors
            ],
        }


def collect(endpoints: Endpoints, shadow_prefix: str, timeout: float) -> StatusReport:
    exporter_samples = fetch_samples(endpoints.exporter_url, metrics.LAG_PREFIX, "--exporter-url", timeout)
    health, consumers = parse_exporter(endpoints.exporter_url, exporter_samples)
    backpressure: list[Backpressure] = []
    unreachable: list[str] = []
    for url in endpoints.job_metrics_urls:
        try:
            backpressure += parse_job(fetch_samples(url, metrics.QUERY_PREFIX, "--job-metrics-url", timeout))
        except StreamstackError as error:
            if endpoints.strict_jobs:
                raise
            unreachable.append(str(error).removeprefix("--job-metrics-url "))
    connectors: list[source_status.ConnectorStatus] = []
    if endpoints.connect_metrics_url:
        try:
            connect_samples = fetch_samples(
                endpoints.connect_metrics_url, "", "--connect-metrics-url", timeout
            )
            connectors = source_status.parse_connectors(connect_samples)
        except StreamstackError as error:
            if endpoints.strict_jobs:
                raise
            unreachable.append(str(error))
    return StatusReport(
        health,
        build_rows(consumers, backpressure, shadow_prefix),
        unreachable,
        source_status.parse_slots(exporter_samples),
        connectors,
    )


def _number(value: float | None, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}f}{suffix}"


def render(report: StatusReport, now: float | None = None) -> str:
    header = (
        "KIND",
        "NAME",
        "SOURCE",
        "LAG",
        "LAG SECONDS",
        "STATUS",
        "UTILIZATION",
        "RATE LIMITED",
        "WATERMARK DELAY",
    )
    table: list[Sequence[str]] = [header]
    for row in report.rows:
        table.append(
            (
                row.kind,
                row.name,
                row.source,
                "-" if row.lag_records is None else str(row.lag_records),
                _number(row.lag_seconds),
                row.status_text,
                _number(row.batch_utilization, 2),
                "-" if row.rate_limited is None else ("yes" if row.rate_limited else "no"),
                _number(row.watermark_delay_seconds, 1, "s"),
            )
        )
    widths = [max(len(line[column]) for line in table) for column in range(len(header))]
    lines = [_exporter_line(report.exporter, time.time() if now is None else now)]
    lines += [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    ]
    if not report.rows:
        lines.append("(no consumer groups, shadow groups, checkpoints or jobs reported yet)")
    lines += [
        f"checkpoint {group}: unreadable (see the exporter's log)"
        for group in report.exporter.unreadable_checkpoints
    ]
    lines += source_status.render_lines(report.slots, report.connectors)
    lines += [
        f"end-to-end freshness of {row.name}: {_number(row.freshness_seconds, 1, 's')}"
        " (commit in the database -> its output)"
        for row in report.rows
        if row.kind == "job" and row.freshness_seconds is not None
    ]
    lines += [
        entry if entry.startswith("--connect-metrics-url") else f"job metrics {entry}"
        for entry in report.unreachable_jobs
    ]
    return "\n".join(lines)


def _exporter_line(health: ExporterState, now: float) -> str:
    age = (
        f"last collection {max(0.0, now - health.last_success_timestamp_seconds):.0f} s ago"
        if health.last_success_timestamp_seconds
        else "no collection yet"
    )
    if health.up:
        return f"lag exporter {health.url}: up, {age}"
    stale = "; values are stale" if health.stale else ""
    return f"lag exporter {health.url}: Kafka unreachable at the last collection ({age}){stale}"


def run(args: argparse.Namespace) -> int:
    if not args.timeout > 0:
        raise StreamstackError(f"--timeout {args.timeout}: must be greater than 0")
    report = collect(endpoints_from_args(args), args.shadow_prefix, args.timeout)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(render(report))
    return 0

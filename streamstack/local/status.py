"""Reading a running job's state from its metrics endpoint, and rendering the live status table."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from prometheus_client.parser import text_string_to_metric_families

_PREFIX = "streamstack_query_"
_SUMMED = frozenset({"offsets_behind_latest"})


@dataclass(frozen=True)
class JobStatus:
    name: str
    state: str
    metrics_url: str
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    offsets_behind_latest: float | None = None
    last_batch_id: int | None = None
    last_batch_age_seconds: float | None = None
    input_rows_total: float | None = None
    freshness_seconds: float | None = None
    """Commit in the database to the job's output (jobs fed by change data capture only)."""
    restarts: int = 0
    last_error: str | None = None
    """The last error line of the job's log when it exited (shown once the supervisor gave it up)."""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def read_job_status(name: str, metrics_url: str, process_running: bool, timeout: float = 2.0) -> JobStatus:
    """State is 'running' once the query reports, 'starting' before, 'exited'/'failed' after."""
    if not process_running:
        return JobStatus(name, "exited", metrics_url)
    try:
        with urllib.request.urlopen(metrics_url, timeout=timeout) as response:
            text = response.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return JobStatus(name, "starting", metrics_url)
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # A job runs several queries (its dead-letter query among them); the table shows the main one.
            if sample.name.startswith(_PREFIX) and sample.labels.get("query") == name:
                key = sample.name.removeprefix(_PREFIX)
                # One series per topic for offsets behind: the job is behind by their sum.
                values[key] = values.get(key, 0.0) + sample.value if key in _SUMMED else sample.value
    if "active" not in values:
        return JobStatus(name, "starting", metrics_url)
    state = "failed" if values.get("failed") else ("running" if values["active"] else "stopped")
    last_progress = values.get("last_progress_timestamp_seconds")
    return JobStatus(
        name=name,
        state=state,
        metrics_url=metrics_url,
        input_rows_per_second=values.get("input_rows_per_second"),
        processed_rows_per_second=values.get("processed_rows_per_second"),
        offsets_behind_latest=values.get("offsets_behind_latest"),
        last_batch_id=int(values["last_batch_id"]) if "last_batch_id" in values else None,
        last_batch_age_seconds=max(0.0, time.time() - last_progress) if last_progress else None,
        input_rows_total=values.get("input_rows_total"),
        freshness_seconds=values.get("freshness_seconds"),
    )


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _columns(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def render_table(statuses: list[JobStatus]) -> str:
    header = ("JOB", "STATE", "RESTARTS", "INPUT/S", "PROCESSED/S", "BEHIND", "LAST BATCH")
    rows = [header]
    for status in statuses:
        last_batch = (
            "-"
            if status.last_batch_id is None
            else f"#{status.last_batch_id} {_number(status.last_batch_age_seconds)}s ago"
        )
        rows.append(
            (
                status.name,
                status.state,
                str(status.restarts),
                _number(status.input_rows_per_second),
                _number(status.processed_rows_per_second),
                _number(status.offsets_behind_latest, 0),
                last_batch,
            )
        )
    freshness = [
        f"{status.name} end-to-end freshness: {_number(status.freshness_seconds)}s"
        " (commit in the database -> its output)"
        for status in statuses
        if status.freshness_seconds is not None
    ]
    failures = [
        f"{status.name} failed: {status.last_error}" for status in statuses if status.state == "failed"
    ]
    return "\n".join([_columns(rows), *freshness, *failures])


def render_children(children: dict[str, dict[str, object]]) -> str:
    """The producers and the lag exporter as the supervisor sees them (the jobs have their own table)."""
    rows = [("PROCESS", "KIND", "STATE", "RESTARTS")]
    failures = []
    for name, child in children.items():
        if child["kind"] == "job":
            continue
        rows.append((name, str(child["kind"]), str(child["state"]), str(child["restarts"])))
        if child["state"] == "failed":
            failures.append(f"{name} failed: {child['last_error']} (log {child['log']})")
    return "\n".join([_columns(rows), *failures])

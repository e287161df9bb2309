"""The live status of `streamstack local up`: repainted in place on a terminal, appended as plain lines
otherwise (a pipe, `| tee`, a log file: whoever reads those parses them, so they keep their format).

`collect_snapshot` reads everything a frame shows (processes, the lag exporter, the jobs' endpoints);
`render_live_status` turns a snapshot into lines without I/O; `open_status_display` is the one place that
chooses between the terminal and the plain form.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from contracts import metrics
from contracts.durations import duration_seconds
from contracts.shadow_groups import SHADOW_GROUP_PREFIX
from streamstack.errors import StreamstackError
from streamstack.lag_status import ConsumerLag, fetch_samples, parse_exporter, parse_job, query_of
from streamstack.local.process import process_group_alive

RELATIVE_TOLERANCE = 0.10
"""With one trigger interval, how far apart the two lag sources may be (in lag seconds) before a row is
marked. The checkpoint's offsets are those a batch plans to reach, the shadow group's those a finished batch
reached, so they differ by up to one batch even when all is well."""

DISAGREEMENT_MARK = "*"


@dataclass(frozen=True)
class SourceLag:
    records: int
    seconds: float


@dataclass(frozen=True)
class QueryRow:
    job: str
    query: str
    state: str
    restarts: int
    shadow: SourceLag | None = None
    checkpoint: SourceLag | None = None


@dataclass(frozen=True)
class StatusSnapshot:
    kafka: str  # running or down
    prometheus: str
    exporter: str
    trigger_interval_seconds: float
    queries: Sequence[QueryRow] = ()
    notes: Sequence[str] = field(default_factory=tuple)


def trigger_interval_seconds(duration: str) -> float:
    """'5 seconds' -> 5.0 (the jobs have already accepted the duration)."""
    try:
        return duration_seconds(duration)
    except ValueError:
        raise StreamstackError(
            f"--trigger-interval {duration!r}: expected a duration such as '5 seconds'"
        ) from None


def disagreement_tolerance_seconds(row: QueryRow, trigger_seconds: float) -> float:
    larger = max(lag.seconds for lag in (row.shadow, row.checkpoint) if lag is not None)
    return max(trigger_seconds, RELATIVE_TOLERANCE * larger)


def sources_disagree(row: QueryRow, trigger_seconds: float) -> bool:
    if row.shadow is None or row.checkpoint is None:
        return False
    difference = abs(row.shadow.seconds - row.checkpoint.seconds)
    return difference > disagreement_tolerance_seconds(row, trigger_seconds)


def _lag_cell(lag: SourceLag | None) -> str:
    return "-" if lag is None else f"{lag.records:,} ({lag.seconds:.1f}s)"


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def render_live_status(snapshot: StatusSnapshot) -> list[str]:
    """One frame: the services' states, then one row per query with both lag sources side by side."""
    header = f"kafka {snapshot.kafka}   prometheus {snapshot.prometheus}   lag exporter {snapshot.exporter}"
    table: list[Sequence[str]] = [("JOB", "QUERY", "STATE", "RESTARTS", "SHADOW LAG", "CHECKPOINT LAG", "")]
    marked = False
    for row in snapshot.queries:
        disagree = sources_disagree(row, snapshot.trigger_interval_seconds)
        marked = marked or disagree
        table.append(
            (
                row.job,
                row.query,
                row.state,
                str(row.restarts),
                _lag_cell(row.shadow),
                _lag_cell(row.checkpoint),
                DISAGREEMENT_MARK if disagree else "",
            )
        )
    lines = [header, "", *_columns(table)]
    if not snapshot.queries:
        lines.append("(no jobs yet)")
    if marked:
        lines.append(
            f"{DISAGREEMENT_MARK} shadow group and checkpoint lag differ by more than "
            f"max(trigger interval {snapshot.trigger_interval_seconds:g}s, {RELATIVE_TOLERANCE:.0%})"
        )
    return [*lines, *snapshot.notes]


def _process_state(state: dict[str, Any], kind: str) -> str:
    pids = [int(entry["pid"]) for entry in state.get("processes", []) if entry["kind"] == kind]
    return "running" if pids and all(process_group_alive(pid) for pid in pids) else "down"


def collect_snapshot(state: dict[str, Any], trigger_seconds: float, timeout: float = 1.0) -> StatusSnapshot:
    children: dict[str, dict[str, Any]] = state.get("children", {})
    exporter_supervised_state = children.get("lag-exporter", {}).get("state", "running")
    exporter = _process_state(state, "exporter") if exporter_supervised_state == "running" else "down"
    notes: list[str] = []
    consumers: list[ConsumerLag] = []
    if state.get("exporter") and exporter == "running":
        url = state["exporter"]["metrics_url"]
        try:
            samples = fetch_samples(url, metrics.LAG_PREFIX, "lag exporter", timeout)
            consumers = parse_exporter(url, samples)[1]
        except StreamstackError as error:
            notes.append(str(error))
    lags: dict[tuple[str, str], SourceLag] = {}
    for consumer in consumers:
        query_name = query_of(consumer, SHADOW_GROUP_PREFIX)
        if query_name is not None:
            lags[(consumer.source, query_name)] = SourceLag(consumer.lag_records, consumer.lag_seconds)
    rows = []
    for job in state.get("jobs", []):
        child = children.get(job["name"], {})
        restarts = int(child.get("restarts") or 0)
        child_state = str(child.get("state", "running"))
        try:
            queries = parse_job(fetch_samples(job["metrics_url"], metrics.QUERY_PREFIX, "job", timeout))
        except StreamstackError:
            queries = []
        if not queries:
            rows.append(
                QueryRow(job["name"], "-", "starting" if child_state == "running" else child_state, restarts)
            )
        for query in queries:
            rows.append(
                QueryRow(
                    job=job["name"],
                    query=query.query,
                    state=query.state if child_state == "running" else child_state,
                    restarts=restarts,
                    shadow=lags.get(("shadow", query.query)),
                    checkpoint=lags.get(("checkpoint", query.query)),
                )
            )
        if child.get("state") == "failed":
            notes.append(f"{job['name']} failed: {child.get('last_error')}")
    return StatusSnapshot(
        kafka=_process_state(state, "kafka"),
        prometheus=_process_state(state, "prometheus"),
        exporter=exporter,
        trigger_interval_seconds=trigger_seconds,
        queries=rows,
        notes=notes,
    )


class StatusWriter(Protocol):
    def frame(self, lines: Sequence[str]) -> None: ...

    def event(self, line: str) -> None: ...


class AppendingWriter:
    """Each frame under a timestamp line, each event on a line of its own: the format pipes always had."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def frame(self, lines: Sequence[str]) -> None:
        self._stream.write("\n".join([f"[{time.strftime('%H:%M:%S')}]", *lines]) + "\n")
        self._stream.flush()

    def event(self, line: str) -> None:
        self._stream.write(f"[{time.strftime('%H:%M:%S')}] {line}\n")
        self._stream.flush()


class RepaintingWriter:
    """Draws each frame over the last one. Events are printed above the frame, which is then drawn again
    below them, so they scroll up like a log while the frame stays at the bottom."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._painted: list[str] = []

    def _fit(self, lines: Sequence[str]) -> list[str]:
        # Moving the cursor up counts screen rows: a wrapped line, or a frame taller than the terminal, would
        # leave the top of the last frame behind.
        try:
            size = os.get_terminal_size(self._stream.fileno())
            columns, rows = size.columns, size.lines
        except OSError:
            columns, rows = 0, 0
        fitted = [line[: columns - 1] for line in lines] if columns > 1 else list(lines)
        if rows > 1 and len(fitted) > rows - 1:
            hidden = len(fitted) - (rows - 2)
            fitted = [*fitted[: rows - 2], f"... {hidden} more lines"]
        return fitted

    def _erase(self) -> str:
        # ESC[nF: to the start of the line n rows up; ESC[J: clear from there to the end of the screen.
        return f"\033[{len(self._painted)}F\033[J" if self._painted else ""

    def _paint(self, lines: Sequence[str]) -> str:
        return "".join(f"\033[2K{line}\n" for line in lines)

    def frame(self, lines: Sequence[str]) -> None:
        fitted = self._fit(lines)
        self._stream.write(self._erase() + self._paint(fitted))
        self._stream.flush()
        self._painted = fitted

    def event(self, line: str) -> None:
        event = f"[{time.strftime('%H:%M:%S')}] {line}"
        self._stream.write(self._erase() + self._paint([event, *self._painted]))
        self._stream.flush()


@dataclass(frozen=True)
class StatusDisplay:
    writer: StatusWriter
    every_seconds: float
    frame: Callable[[dict[str, Any]], list[str]]


def open_status_display(
    stream: TextIO, plain_frame: Callable[[dict[str, Any]], str], trigger_seconds: float
) -> StatusDisplay:
    """On a terminal the live frame, repainted every 2 s; otherwise `plain_frame`'s tables every 5 s."""
    if stream.isatty():
        return StatusDisplay(
            RepaintingWriter(stream),
            2.0,
            lambda state: render_live_status(collect_snapshot(state, trigger_seconds)),
        )
    return StatusDisplay(AppendingWriter(stream), 5.0, lambda state: plain_frame(state).splitlines())

"""The live status of `local up`: the frame rendered from a snapshot, and the writer drawing it on a real
pseudo-terminal (repainted in place) and on a pipe (appended as plain lines)."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import termios
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from streamstack.local.live_status import (
    AppendingWriter,
    QueryRow,
    RepaintingWriter,
    SourceLag,
    StatusSnapshot,
    open_status_display,
    render_live_status,
)

TIMESTAMP = r"\[\d\d:\d\d:\d\d\]"


def snapshot(*queries: QueryRow, kafka: str = "running", exporter: str = "running") -> StatusSnapshot:
    return StatusSnapshot(
        kafka=kafka, prometheus="running", exporter=exporter, trigger_interval_seconds=5.0, queries=queries
    )


def row_of(lines: list[str], query: str) -> list[str]:
    [line] = [line for line in lines if f"  {query}  " in line]
    return line.split()


def test_a_query_row_shows_both_lag_sources_side_by_side() -> None:
    query = QueryRow(
        "clickstream-windows", "windows", "running", 0, SourceLag(1200, 12.0), SourceLag(1250, 13.5)
    )
    lines = render_live_status(snapshot(query))
    assert lines[2].split() == ["JOB", "QUERY", "STATE", "RESTARTS", "SHADOW", "LAG", "CHECKPOINT", "LAG"]
    assert row_of(lines, "windows") == [
        "clickstream-windows", "windows", "running", "0", "1,200", "(12.0s)", "1,250", "(13.5s)"
    ]  # fmt: skip


def test_a_query_known_to_one_source_only_shows_a_dash_for_the_other() -> None:
    query = QueryRow("ad-attribution", "attribution", "running", 0, shadow=None, checkpoint=SourceLag(7, 0.5))
    assert row_of(render_live_status(snapshot(query)), "attribution")[4:] == ["-", "7", "(0.5s)"]


def test_sources_further_apart_than_the_tolerance_are_marked() -> None:
    # Tolerance max(trigger interval 5 s, 10 % of the larger lag).
    within_a_trigger = QueryRow("job", "a", "running", 0, SourceLag(100, 10.0), SourceLag(140, 14.9))
    within_ten_percent = QueryRow("job", "b", "running", 0, SourceLag(900, 100.0), SourceLag(980, 109.0))
    apart = QueryRow("job", "c", "running", 0, SourceLag(100, 10.0), SourceLag(600, 60.0))
    lines = render_live_status(snapshot(within_a_trigger, within_ten_percent, apart))
    assert row_of(lines, "a")[-1] == "(14.9s)"
    assert row_of(lines, "b")[-1] == "(109.0s)"
    assert row_of(lines, "c")[-1] == "*"
    assert lines[-1] == "* shadow group and checkpoint lag differ by more than max(trigger interval 5s, 10%)"


def test_no_legend_without_a_marked_row() -> None:
    query = QueryRow("job", "a", "running", 0, SourceLag(100, 10.0), SourceLag(100, 10.0))
    assert not any("differ" in line for line in render_live_status(snapshot(query)))


def test_restarts_and_the_supervisor_state_are_shown() -> None:
    query = QueryRow("sessionization", "sessions", "restarting", 3)
    assert row_of(render_live_status(snapshot(query)), "sessions")[2:] == ["restarting", "3", "-", "-"]


def test_the_header_line_says_which_services_run() -> None:
    lines = render_live_status(snapshot(kafka="down", exporter="down"))
    assert lines[0].split() == ["kafka", "down", "prometheus", "running", "lag", "exporter", "down"]
    assert lines[-1] == "(no jobs yet)"


@contextmanager
def pseudo_terminal() -> Iterator[tuple[int, TextIO]]:
    """The master side's fd and the slave side as a text stream, 80 x 24."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    stream = os.fdopen(slave, "w", encoding="utf-8")
    try:
        yield master, stream
    finally:
        stream.close()
        os.close(master)


def read_available(fd: int) -> str:
    chunks = []
    while select.select([fd], [], [], 0.2)[0]:
        chunks.append(os.read(fd, 65536))
    return b"".join(chunks).decode()


def screen_after(output: str) -> list[str]:
    """The lines a terminal shows after `output`, for the writer's sequences (ESC[nF, ESC[J, ESC[2K)."""
    screen: list[str] = [""]
    row = 0
    # The terminal turns each \n into \r\n; the writer never returns to the start of a line otherwise.
    for count, command, newline, text in re.findall(r"\x1b\[(\d*)([A-Za-z])|(\n)|([^\x1b\r\n]+)", output):
        if command == "F":
            row = max(0, row - int(count or 1))
        elif command == "J":
            del screen[row + 1 :]
            screen[row] = ""
        elif command == "K":
            screen[row] = ""
        elif newline:
            row += 1
            if row == len(screen):
                screen.append("")
        elif text:
            screen[row] += text
    return screen


def test_on_a_terminal_a_second_frame_overwrites_the_first() -> None:
    with pseudo_terminal() as (master, terminal):
        writer = open_status_display(terminal, lambda _state: "", 5.0).writer
        assert isinstance(writer, RepaintingWriter)
        writer.frame(["header", "JOB  LAG", "a    10", "b    20"])
        first = read_available(master)
        writer.frame(["header", "JOB  LAG", "a    11"])
        second = read_available(master)
        writer.event("sessionization restarted (restart 1, pid 42)")
        third = read_available(master)
    assert "\x1b[" in first
    assert second.startswith("\x1b[4F\x1b[J")  # up to the first frame's top line, cleared to the end
    assert screen_after(first + second) == ["header", "JOB  LAG", "a    11", ""]
    assert re.fullmatch(
        rf"{TIMESTAMP} sessionization restarted \(restart 1, pid 42\)",
        screen_after(first + second + third)[0],
    )
    assert screen_after(first + second + third)[1:] == ["header", "JOB  LAG", "a    11", ""]


def test_a_frame_taller_or_wider_than_the_terminal_is_cut_to_fit() -> None:
    with pseudo_terminal() as (master, terminal):
        RepaintingWriter(terminal).frame([f"line {index} " + "x" * 100 for index in range(30)])
        shown = screen_after(read_available(master))
    assert len(shown) == 24 and shown[-1] == ""
    assert shown[-2] == "... 8 more lines"
    assert all(len(line) <= 79 for line in shown)


def test_on_a_pipe_frames_are_appended_as_plain_lines() -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as pipe, os.fdopen(read_end) as reader:
        display = open_status_display(pipe, lambda _state: "JOB  STATE\na    running\n\nPROCESS", 5.0)
        assert isinstance(display.writer, AppendingWriter)
        for _ in range(2):
            display.writer.frame(display.frame({}))
        display.writer.event("producer restarted (restart 1, pid 7)")
        pipe.close()
        output = reader.read()
    assert "\x1b" not in output
    frame = rf"{TIMESTAMP}\nJOB  STATE\na    running\n\nPROCESS\n"
    assert re.fullmatch(rf"{frame}{frame}{TIMESTAMP} producer restarted \(restart 1, pid 7\)\n", output)

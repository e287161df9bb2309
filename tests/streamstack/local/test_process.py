"""Stopping several child processes: every one is signalled before any is waited for, so a stack of Spark
drivers (each taking seconds to shut down gracefully) stops in the time of the slowest, not the sum."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from streamstack.local.identity import ProcessIdentity
from streamstack.local.process import ManagedProcess, stop_all
from streamstack.local.stack import stop_recorded_processes
from tests.kafka_helpers import wait_for

SLOW_TO_STOP = """
import signal, sys, time
from pathlib import Path

record = Path(sys.argv[1])

def stop(_signum, _frame):
    with record.open("a") as file:
        file.write(f"term {time.monotonic()}\\n")
    time.sleep(1.5)  # a graceful shutdown that takes a while
    with record.open("a") as file:
        file.write(f"exit {time.monotonic()}\\n")
    sys.exit(0)

signal.signal(signal.SIGTERM, stop)
record.write_text("ready\\n")
while True:
    time.sleep(0.1)
"""


def _start_slow_to_stop(tmp_path: Path, count: int) -> tuple[list[ManagedProcess], list[Path]]:
    records = [tmp_path / f"child-{index}.txt" for index in range(count)]
    processes = [
        ManagedProcess(f"child-{index}", [sys.executable, "-c", SLOW_TO_STOP, str(record)], tmp_path / "log")
        for index, record in enumerate(records)
    ]
    for process in processes:
        process.start()
    wait_for(lambda: all(record.exists() for record in records), timeout=30, what="the children to start")
    return processes, records


def _times(records: list[Path], event: str) -> list[float]:
    return [
        float(line.split()[1])
        for record in records
        for line in record.read_text().splitlines()
        if line.startswith(f"{event} ")
    ]


def test_stop_all_signals_every_process_before_waiting_for_any(tmp_path: Path) -> None:
    processes, records = _start_slow_to_stop(tmp_path, 3)
    try:
        stop_all(processes)
    finally:
        for process in processes:
            process.stop(timeout=1)
    terms, exits = _times(records, "term"), _times(records, "exit")
    assert len(terms) == len(exits) == 3
    assert max(terms) < min(exits)
    assert [process.exit_code() for process in processes] == [0, 0, 0]


def test_down_from_another_terminal_signals_every_leftover_before_waiting(tmp_path: Path) -> None:
    processes, records = _start_slow_to_stop(tmp_path, 3)
    try:
        identities = [ProcessIdentity.of(process.pid) for process in processes]
        state = {
            "processes": [
                {"name": process.name, "kind": "job", **identity.as_record()}
                for process, identity in zip(processes, identities, strict=True)
                if identity is not None
            ]
        }
        stopped, skipped = stop_recorded_processes(state)
        assert sorted(stopped) == ["child-0", "child-1", "child-2"] and skipped == []
    finally:
        for process in processes:
            process.stop(timeout=1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(_times(records, "exit")) < 3:
        time.sleep(0.1)
    terms, exits = _times(records, "term"), _times(records, "exit")
    assert len(terms) == len(exits) == 3
    assert max(terms) < min(exits)

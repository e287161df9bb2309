"""Which process a pid is: its start time and command line, so that a recorded pid is signalled only while it
still names the process that was recorded (pids are reused)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PROC = Path("/proc")
# Fields of /proc/<pid>/stat, counted from 1 as in proc(5); field 2 (the command name) may contain spaces.
_STATE_FIELD = 3
_START_TIME_FIELD = 22
# A kernel thread's command line stays empty: read it at most this often, 0.2 s in all.
_CMDLINE_READS = 20
_CMDLINE_RETRY_S = 0.01


def stat_fields(pid: int) -> list[str] | None:
    """Fields 3 onwards of /proc/<pid>/stat (after the parenthesised command name), or None if no such pid."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    start_time: int
    """Clock ticks after boot (field 22 of /proc/<pid>/stat): with the pid, unique until the next boot."""
    cmdline: tuple[str, ...]

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        """The live process with this pid, or None if there is none (a zombie has exited: None too)."""
        fields = stat_fields(pid)
        if fields is None or fields[0] == "Z":
            return None
        raw = b""
        # Right after exec the new program's arguments may not be in place yet (the parent of a Popen
        # resumes once exec has closed the child's descriptors): an empty command line is read again.
        for _ in range(_CMDLINE_READS):
            try:
                raw = (_PROC / str(pid) / "cmdline").read_bytes()
            except (FileNotFoundError, ProcessLookupError):
                return None
            if raw:
                break
            time.sleep(_CMDLINE_RETRY_S)
        cmdline = tuple(arg.decode(errors="surrogateescape") for arg in raw.split(b"\0")[:-1])
        return cls(pid, int(fields[_START_TIME_FIELD - _STATE_FIELD]), cmdline)

    def as_record(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_time": self.start_time, "cmdline": list(self.cmdline)}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ProcessIdentity | None:
        """The identity a state file records, or None if it records only a pid."""
        if "start_time" not in record or "cmdline" not in record:
            return None
        return cls(int(record["pid"]), int(record["start_time"]), tuple(record["cmdline"]))


def identity_mismatch(record: dict[str, Any], current: ProcessIdentity) -> str | None:
    """None if `current`, the live process with the pid of `record`, is the process recorded; otherwise why
    it must not be signalled."""
    recorded = ProcessIdentity.from_record(record)
    if recorded is None:
        return "its start time and command line were not recorded, so it cannot be told from a new process"
    if current.start_time != recorded.start_time:
        return "a different process now has this pid"
    if current.cmdline != recorded.cmdline:
        return f"it now runs a different command ({' '.join(current.cmdline)[:80]})"
    return None

"""The CPU of a process's threads from /proc, and which of a HotSpot JVM's threads each is: shared by the
benchmarks that weigh the JIT's share (`bench_windows` for the Spark driver, `bench_exporter` for the
brokers)."""

from __future__ import annotations

import os
from pathlib import Path

# HotSpot's thread names as /proc shows them (cut to 15 characters)
_JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
_GC_THREADS = ("GC Thread", "G1 ", "VM Thread")


def thread_kind(name: str) -> str:
    """The kind of a thread by its name: "jit" for HotSpot's JIT compiler threads, "gc" for its garbage
    collection and safepoint threads, "other" for the rest (in a broker: the network and request handler
    threads, its schedulers)."""
    if name.startswith(_JIT_THREADS):
        return "jit"
    if name.startswith(_GC_THREADS):
        return "gc"
    return "other"


def threads_cpu_seconds(pid: int) -> dict[int, tuple[str, float]]:
    """{thread id: (name, utime + stime in seconds)} of a process's live threads (one that ends meanwhile is
    left out)."""
    ticks = os.sysconf("SC_CLK_TCK")
    found: dict[int, tuple[str, float]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return found

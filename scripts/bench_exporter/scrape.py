"""Scraping an exporter as Prometheus does, and watching its process: latency, samples, health, memory."""

from __future__ import annotations

import gzip
import http.client
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from scripts.jvm_threads import thread_kind, threads_cpu_seconds
from scripts.stats import percentile
from streamstack.local.ports import LOOPBACK
from streamstack.paths import REPO_ROOT

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)", re.MULTILINE)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def log(line: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


@contextmanager
def child(command: list[str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log_path.open("wb") as output:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=output, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a process, in MiB."""
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values["rss_mb" if key == "VmRSS" else "peak_rss_mb"] = int(rest.split()[0]) / 1024
    return values


def cpu_seconds(pids: Sequence[int]) -> float:
    """User and system CPU time the processes have used so far, all their threads, in seconds."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (proc(5): fields 14 and 15)
    return total / ticks


def _threads(pids: Sequence[int]) -> dict[tuple[int, int], tuple[str, float]]:
    """{(pid, thread id): (kind, CPU seconds so far)} of the processes' live threads."""
    return {
        (pid, thread): (thread_kind(name), seconds)
        for pid in pids
        for thread, (name, seconds) in threads_cpu_seconds(pid).items()
    }


class ThreadCpu:
    """The CPU seconds processes use from now on, by kind of thread (`thread_kind`). /proc keeps no record of
    an ended thread (HotSpot ends compiler threads it no longer needs), so every `sample()` keeps what each
    live thread had used by then; the process totals count ended threads too, and what the kept samples do
    not explain counts as "other"."""

    def __init__(self, pids: Sequence[int]) -> None:
        self._pids = list(pids)
        self._total_before = cpu_seconds(self._pids)
        self._before = _threads(self._pids)
        self._latest = dict(self._before)

    def sample(self) -> None:
        self._latest.update(_threads(self._pids))

    def by_kind(self) -> dict[str, float]:
        self.sample()
        used = {"jit": 0.0, "gc": 0.0}
        for key, (kind, seconds) in self._latest.items():
            if kind in used:
                used[kind] += seconds - self._before.get(key, (kind, 0.0))[1]
        total = cpu_seconds(self._pids) - self._total_before
        return {**used, "other": total - used["jit"] - used["gc"]}


def thread_run_queue_seconds() -> float:
    """How long the calling thread has waited on a run queue so far: runnable, but no CPU free for it
    (`/proc/thread-self/schedstat`'s second field, in nanoseconds)."""
    return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9


def cpu_ticks() -> tuple[int, int]:
    """(busy, all) jiffies of every CPU of the machine so far (`/proc/stat`'s `cpu` line; idle and iowait
    are not busy)."""
    fields = [int(field) for field in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def ticks_between(before: tuple[int, int], after: tuple[int, int]) -> tuple[int, int]:
    """(busy, all) jiffies that passed between two `cpu_ticks()`."""
    return after[0] - before[0], after[1] - before[1]


def busy_fraction(ticks: Sequence[tuple[int, int]]) -> float | None:
    """The share of the machine's CPU time that was busy over spans of (busy, all) jiffies, summed before
    dividing: a jiffy is 10 ms, so a 10 ms scrape alone says 0, 1 or nothing. None if no jiffy passed."""
    busy, total = sum(span[0] for span in ticks), sum(span[1] for span in ticks)
    return busy / total if total else None


@dataclass(frozen=True)
class Scrape:
    seconds: float
    raw: bytes  # as sent
    gzipped: bool
    first_byte_seconds: float = 0.0  # until the response's headers were read
    run_queue_seconds: float = 0.0  # of those seconds, the client's thread waited this long for a CPU

    @property
    def wire_bytes(self) -> int:
        return len(self.raw)

    @property
    def body(self) -> str:
        """The text, decompressed on demand: at 50,000 x 500 that is 238 MB and about 0.7 s of CPU, which
        the benchmark's client spent after every scrape on the cores the exporter and the brokers share."""
        return (gzip.decompress(self.raw) if self.gzipped else self.raw).decode()


def scrape(port: int, path: str = "/metrics", timeout: float = 600, like_prometheus: bool = True) -> Scrape:
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"} if like_prometheus else {}
    started = time.perf_counter()
    waited = thread_run_queue_seconds()
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        first_byte = time.perf_counter() - started
        raw = response.read()
        waited = thread_run_queue_seconds() - waited
        elapsed = time.perf_counter() - started
        if response.status != 200:
            raise RuntimeError(f"GET {path} on port {port}: HTTP {response.status}")
        gzipped = response.getheader("Content-Encoding") == "gzip"
    finally:
        connection.close()
    return Scrape(elapsed, raw, gzipped, first_byte, waited)


def samples(body: str, name: str) -> Iterator[tuple[dict[str, str], float]]:
    for match in _SAMPLE.finditer(body):
        if match.group(1) == name:
            yield dict(_LABEL.findall(match.group(2))), float(match.group(3))


def health(port: int) -> dict[str, float]:
    names = ("last_success_timestamp_seconds", "collection_duration_seconds", "up")
    query = "&".join(f"name[]=streamstack_lag_exporter_{name}" for name in names)
    body = scrape(port, f"/metrics?{query}", timeout=60, like_prometheus=False).body
    values = {}
    for line in body.splitlines():
        if line.startswith("streamstack_lag_exporter_"):
            name, value = line.split(" ")[:2]
            values[name.removeprefix("streamstack_lag_exporter_")] = float(value)
    return values


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.25)
    raise TimeoutError(f"{what} within {timeout:.0f} s")


def scrape_breakdown(
    seconds: Sequence[float], run_queue_ms: Sequence[float], ticks: Sequence[tuple[int, int]], over_ms: float
) -> dict[str, dict[str, float | None]]:
    """The scrapes over `over_ms` and the rest: how many, their median latency, the median time the client's
    thread waited for a CPU in them, and how busy the machine's CPUs were over them."""
    parts: dict[str, list[int]] = {"over": [], "rest": []}
    for index, elapsed in enumerate(seconds):
        parts["over" if 1000 * elapsed > over_ms else "rest"].append(index)
    breakdown: dict[str, dict[str, float | None]] = {}
    for name, indexes in parts.items():
        if indexes:
            busy = busy_fraction([ticks[i] for i in indexes])
            breakdown[name] = {
                "scrapes": len(indexes),
                "median_ms": round(statistics.median(1000 * seconds[i] for i in indexes), 2),
                "median_client_run_queue_ms": round(statistics.median(run_queue_ms[i] for i in indexes), 2),
                "cpus_busy": None if busy is None else round(busy, 3),
            }
    return breakdown


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    return {
        "scrapes": len(seconds),
        "p50_ms": 1000 * percentile(seconds, 50),
        "p99_ms": 1000 * percentile(seconds, 99),
        "max_ms": 1000 * max(seconds),
    }

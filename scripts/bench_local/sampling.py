"""What one sample reads: the stack's Prometheus (HTTP API) and the CPU time of the stack's processes; and the
machine and versions a run records."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import time
import urllib.error
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contracts import metrics
from contracts.shadow_groups import SHADOW_GROUP_PREFIX
from scripts.bench_local.report import LAG_SOURCES, MACHINE, Alert, QuerySample, Sample
from streamstack.errors import StreamstackError
from streamstack.local.identity import stat_fields
from streamstack.local.prometheus import query_prometheus
from streamstack.paths import REPO_ROOT
from streamstack.runtimes import Runtimes
from streamstack.runtimes.lock import load_lock

UTILIZATION = metrics.QUERY_PREFIX + metrics.BATCH_UTILIZATION
LAG_SECONDS = metrics.LAG_PREFIX + metrics.GROUP_MAX_SECONDS
INPUT_ROWS = metrics.QUERY_PREFIX + "input_rows_total"
PHASE_SECONDS = metrics.QUERY_PREFIX + "batch_phase_duration_seconds"

Query = Callable[[str], list[dict[str, Any]]]


def promql(window_seconds: float) -> dict[str, str]:
    """The queries of one sample; `[window]` is the interval since the previous sample."""
    window = f"[{window_seconds:g}s]"
    sources = "|".join(LAG_SOURCES)
    return {
        "utilization": f"max by (query) ({UTILIZATION})",
        "utilization_max": f"max by (query) (max_over_time({UTILIZATION}{window}))",
        "utilization_mean": f"max by (query) (avg_over_time({UTILIZATION}{window}))",
        "lag_max": f'max by (source, group) (max_over_time({LAG_SECONDS}{{source=~"{sources}"}}{window}))',
        "input_rate": f"sum by (query) (rate({INPUT_ROWS}{window}))",
        "phases": f"max by (query, phase) (avg_over_time({PHASE_SECONDS}{window}))",
        "alerts": f'max_over_time(ALERTS{{alertstate=~"pending|firing"}}{window})',
    }


def lag_query(source: str, group: str) -> str:
    """The query behind a lag series: a shadow group is `<prefix><query>`, a checkpoint `<job>/<query>`."""
    return group.removeprefix(SHADOW_GROUP_PREFIX) if source == "shadow" else group.rsplit("/", 1)[-1]


def read_prometheus(
    query: Query, window_seconds: float
) -> tuple[dict[str, QuerySample], list[Alert], list[str]]:
    """Per query what the sample's queries return, the alerts, and a line per query that failed."""
    results: dict[str, list[dict[str, Any]]] = {}
    errors = []
    for key, expression in promql(window_seconds).items():
        try:
            results[key] = query(expression)
        except (StreamstackError, urllib.error.URLError, OSError, ValueError) as error:
            errors.append(f"{key}: {error}")
            results[key] = []
    fields: dict[str, dict[str, Any]] = {}

    def entry(name: str) -> dict[str, Any]:
        return fields.setdefault(name, {"lag_max_seconds": {}, "phase_mean_seconds": {}})

    for key in ("utilization", "utilization_max", "utilization_mean"):
        for series in results[key]:
            entry(series["metric"]["query"])[key] = float(series["value"][1])
    for series in results["input_rate"]:
        entry(series["metric"]["query"])["input_rows_per_second"] = float(series["value"][1])
    for series in results["lag_max"]:
        labels = series["metric"]
        entry(lag_query(labels["source"], labels["group"]))["lag_max_seconds"][labels["source"]] = float(
            series["value"][1]
        )
    for series in results["phases"]:
        labels = series["metric"]
        entry(labels["query"])["phase_mean_seconds"][labels["phase"]] = float(series["value"][1])
    alerts = [
        Alert(
            series["metric"]["alertname"],
            series["metric"]["alertstate"],
            {
                name: value
                for name, value in series["metric"].items()
                if name not in ("__name__", "alertname", "alertstate")
            },
        )
        for series in results["alerts"]
    ]
    return {name: QuerySample(**values) for name, values in sorted(fields.items())}, alerts, errors


# -- CPU -----------------------------------------------------------------------------------------------------

_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
# Fields of /proc/<pid>/stat from 1 as in proc(5); stat_fields() starts at field 3.
_PGRP, _UTIME, _CSTIME = 5, 14, 17


def _ticks_by_process_group() -> dict[int, int]:
    """CPU ticks (user and system, with those of reaped children) of every live process, summed by group."""
    ticks: dict[int, int] = {}
    for process_dir in Path("/proc").glob("[0-9]*"):
        fields = stat_fields(int(process_dir.name))
        if fields is None:
            continue
        group = int(fields[_PGRP - 3])
        ticks[group] = ticks.get(group, 0) + sum(int(value) for value in fields[_UTIME - 3 : _CSTIME - 2])
    return ticks


def _machine_busy_ticks() -> int:
    """Ticks all CPUs spent running anything since boot: user, nice, system, irq and softirq from /proc/stat's
    first line (not idle, iowait or steal; guest time is already in user and nice)."""
    user, nice, system, _idle, _iowait, irq, softirq = (
        int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]
    )
    return user + nice + system + irq + softirq


class CpuMeter:
    """Cores used between two readings: by each process the stack records (its whole process group, so a
    PySpark driver's JVM counts for its job), by this process (the benchmark and the stack's supervisor),
    and by the whole machine."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, float]] = {}  # name -> (pid, seconds)
        self._at = time.monotonic()

    def _readings(self, processes: list[dict[str, Any]]) -> dict[str, tuple[int, float]]:
        by_group = _ticks_by_process_group()
        readings = {
            entry["name"]: (int(entry["pid"]), by_group.get(int(entry["pid"]), 0) / _TICKS_PER_SECOND)
            for entry in processes
        }
        readings["bench and supervisor"] = (os.getpid(), time.process_time())
        readings[MACHINE] = (0, _machine_busy_ticks() / _TICKS_PER_SECOND)
        return readings

    def start(self, processes: list[dict[str, Any]]) -> None:
        self._last, self._at = self._readings(processes), time.monotonic()

    def cores(self, processes: list[dict[str, Any]]) -> dict[str, float]:
        """Cores used since the last call; a process restarted since then counts from its start."""
        readings, now = self._readings(processes), time.monotonic()
        elapsed = max(now - self._at, 1e-6)
        cores = {}
        for name, (pid, seconds) in readings.items():
            last_pid, last_seconds = self._last.get(name, (pid, 0.0))
            cores[name] = max(0.0, seconds - (last_seconds if last_pid == pid else 0.0)) / elapsed
        self._last, self._at = readings, now
        return cores


def take_sample(
    prometheus_url: str,
    cpu: CpuMeter,
    processes: list[dict[str, Any]],
    elapsed_seconds: float,
    interval_seconds: float,
) -> Sample:
    queries, alerts, errors = read_prometheus(
        lambda expression: query_prometheus(prometheus_url, expression, timeout=10), interval_seconds
    )
    one, five, fifteen = os.getloadavg()
    return Sample(
        at=time.time(),
        elapsed_seconds=elapsed_seconds,
        interval_seconds=interval_seconds,
        load_average=(one, five, fifteen),
        queries=queries,
        alerts=tuple(alerts),
        cpu_cores=cpu.cores(processes),
        errors=tuple(errors),
    )


# -- the machine and the versions ----------------------------------------------------------------------------


def _meminfo_mb(key: str) -> float | None:
    match = re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    return int(match.group(1)) / 1024 if match else None


def machine() -> dict[str, Any]:
    cpu_models = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    return {
        "cores": os.cpu_count(),
        "cpu_model": cpu_models[0] if cpu_models else None,
        "memory_total_mb": _meminfo_mb("MemTotal"),
        "memory_available_mb": _meminfo_mb("MemAvailable"),
        "load_average": list(os.getloadavg()),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


PINNED_PACKAGES = ("pyspark", "confluent-kafka", "kafka-python", "prometheus_client")


def versions(runtimes: Runtimes) -> dict[str, Any]:
    """The versions that shape the run, from the lock files (constraints.txt, runtimes.lock.json), and the
    Java the jobs and Kafka run on."""
    pins = dict(
        line.split("==", 1)
        for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    lock = load_lock()
    jars = {artifact.artifact: artifact.version for artifact in lock.maven}
    java = subprocess.run(
        [str(runtimes.java), "-version"], capture_output=True, text=True, check=False, timeout=30
    )
    return {
        "python_packages": {name: pins.get(name) for name in PINNED_PACKAGES},
        "kafka": jars.get("kafka_2.13"),
        "spark_sql_kafka": jars.get("spark-sql-kafka-0-10_2.13"),
        "prometheus": lock.prometheus.version,
        "java": (java.stderr.strip().splitlines() or ["unknown"])[0],
    }

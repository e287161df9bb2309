"""The local stack: Kafka, topics, jobs, producers and Prometheus, started and stopped as one.

The process that calls `up()` is the supervisor: it owns every child and, on Ctrl-C or SIGTERM, stops them
in reverse order. Every child is its own process group (a PySpark driver's JVM included) and is killed by the
kernel if the supervisor dies without stopping it. `state.json` in the work directory says where everything
is, for `status` and `down` from another terminal: each process is recorded, with its start time and command
line, before the supervisor waits for anything, and `down` signals only processes that still match.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.cdc import cdc_source
from contracts.pipeline import Producer
from streamstack.errors import StreamstackError
from streamstack.local.connect import CONNECT_SCRAPE_JOB, WORKLOAD_NAME, LocalCdcSource
from streamstack.local.identity import ProcessIdentity, identity_mismatch
from streamstack.local.jobs import (
    lag_exporter_process,
    producer_process,
    spark_job_process,
    staggered_trigger_intervals,
)
from streamstack.local.kafka import LocalKafka
from streamstack.local.pipeline import Pipeline, dev_stack_job_arguments
from streamstack.local.ports import LOOPBACK, claim_port
from streamstack.local.process import ManagedProcess, process_group_alive, stop_all, stop_process_groups
from streamstack.local.prometheus import KAFKA_SCRAPE_JOB, LocalPrometheus
from streamstack.local.restart_policy import RestartPolicy
from streamstack.local.service import LocalService
from streamstack.local.status import JobStatus, read_job_status
from streamstack.local.supervision import Supervisor
from streamstack.local.supervisor_metrics import SupervisorMetricsServer
from streamstack.runtimes import Runtimes
from streamstack.runtimes.cdc import ensure_cdc

STATE_FILE = "state.json"
# Where the users/orders changelogs come from: PostgreSQL through Kafka Connect + Debezium (contracts/cdc.py),
# or the synthetic changelog producer writing what Debezium would.
CHANGELOG_SOURCES = ("database", "synthetic")
DEFAULT_CHANGELOG_SOURCE = "database"


@dataclass(frozen=True)
class LocalStackOptions:
    workdir: Path
    kafka_port: int = 9092
    prometheus_port: int = 9090
    metrics_port: int = 9401
    exporter_port: int = 9308
    supervisor_port: int = 9309
    rate: float = 50.0
    trigger_interval: str = "5 seconds"
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)
    changelog_source: str = DEFAULT_CHANGELOG_SOURCE

    @classmethod
    def on_free_ports(cls, workdir: Path, **settings: Any) -> LocalStackOptions:
        """Every service on a port the system picks at start (tests, benchmarks): beside a running stack."""
        return dataclasses.replace(
            cls(workdir, **settings),
            kafka_port=0,
            prometheus_port=0,
            metrics_port=0,
            exporter_port=0,
            supervisor_port=0,
        )


def state_path(workdir: Path) -> Path:
    return workdir / STATE_FILE


def read_state(workdir: Path) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(state_path(workdir).read_text())
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, OSError) as error:
        raise StreamstackError(
            f"state file {state_path(workdir)} is unreadable ({error}); run `streamstack local down`"
        ) from None
    return state


def supervisor_alive(state: dict[str, Any]) -> bool:
    """The recorded supervisor still runs (not merely another process that got its pid)."""
    pid = int(state.get("supervisor_pid", 0))
    if pid <= 0:
        return False
    current = ProcessIdentity.of(pid)
    if current is None:
        return False
    return "supervisor" not in state or identity_mismatch(state["supervisor"], current) is None


def supervisor_skipped(state: dict[str, Any]) -> str | None:
    """Why the live process with the recorded supervisor's pid is not signalled (a line), if it is not."""
    pid = int(state.get("supervisor_pid", 0))
    current = ProcessIdentity.of(pid) if pid > 0 else None
    if current is None or "supervisor" not in state:
        return None
    reason = identity_mismatch(state["supervisor"], current)
    return None if reason is None else f"skipped pid {pid} (supervisor): {reason}"


def require_running_state(workdir: Path) -> dict[str, Any]:
    state = read_state(workdir)
    if state is None:
        raise StreamstackError(
            f"no local stack is running (no {state_path(workdir)}); start one with `streamstack local up`"
        )
    if not supervisor_alive(state):
        raise StreamstackError(
            f"stale state file {state_path(workdir)}: its supervisor (pid {state.get('supervisor_pid')}) "
            "is not running; run `streamstack local down` to clean up"
        )
    return state


def job_statuses(state: dict[str, Any]) -> list[JobStatus]:
    """Each job as its metrics report it, with what the supervisor knows: its restarts, and whether it
    waits for a restart or was given up."""
    statuses = []
    for job in state.get("jobs", []):
        status = read_job_status(job["name"], job["metrics_url"], process_group_alive(int(job["pid"])))
        child = state.get("children", {}).get(job["name"])
        if child is not None:
            supervised_state = status.state if child["state"] == "running" else child["state"]
            status = dataclasses.replace(
                status, state=supervised_state, restarts=child["restarts"], last_error=child["last_error"]
            )
        statuses.append(status)
    return statuses


def _child_summary(state: dict[str, Any], name: str) -> dict[str, Any]:
    child = state.get("children", {}).get(name, {})
    return {key: child.get(key) for key in ("state", "restarts", "last_error")}


def status_document(state: dict[str, Any]) -> dict[str, Any]:
    """Machine-readable status of a running stack (`streamstack local status --json`)."""
    return {
        "workdir": state["workdir"],
        "supervisor_pid": state["supervisor_pid"],
        "ready": state.get("ready", False),
        "kafka": {"bootstrap_servers": state["kafka"]["bootstrap_servers"]},
        "prometheus": {"url": state["prometheus"]["url"]} if state.get("prometheus") else None,
        "exporter": (
            {"metrics_url": state["exporter"]["metrics_url"], **_child_summary(state, "lag-exporter")}
            if state.get("exporter")
            else None
        ),
        "supervisor_metrics_url": state.get("supervisor_metrics_url"),
        "jobs": [
            {**status.as_dict(), "metrics_port": job["metrics_port"], "checkpoint_dir": job["checkpoint_dir"]}
            for job, status in zip(state.get("jobs", []), job_statuses(state), strict=True)
        ],
        "producers": [
            {"name": producer["name"], "topic": producer["topic"], **_child_summary(state, producer["name"])}
            for producer in state["producers"]
        ],
    }


def _process_record(process: ManagedProcess, kind: str) -> dict[str, Any]:
    identity = ProcessIdentity.of(process.pid)
    return {
        "name": process.name,
        "kind": kind,
        **(identity.as_record() if identity is not None else {"pid": process.pid}),
    }


def stop_recorded_processes(state: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Stop every process group a state file records, newest first, if its leader is still the process
    recorded; the names of those stopped, and a line for each one skipped saying why."""
    stopped, skipped, pids = [], [], []
    for entry in reversed(state.get("processes", [])):
        pid = int(entry["pid"])
        current = ProcessIdentity.of(pid)
        if current is not None and (reason := identity_mismatch(entry, current)) is not None:
            skipped.append(f"skipped pid {pid} ({entry['name']}): {reason}")
            continue
        # With its leader gone, a group that still has members is still ours: Linux does not reuse a pid
        # while a process group bears its number.
        if process_group_alive(pid):
            pids.append(pid)
            stopped.append(entry["name"])
    stop_process_groups([(pid, None) for pid in pids])
    return stopped, skipped


class LocalStack:
    def __init__(self, runtimes: Runtimes, pipeline: Pipeline, options: LocalStackOptions) -> None:
        self.runtimes = runtimes
        self.pipeline = pipeline
        self.options = options
        self.workdir = options.workdir
        self._processes: list[ManagedProcess] = []
        self._kafka: LocalKafka | None = None
        self._prometheus: LocalPrometheus | None = None
        self._cdc: LocalCdcSource | None = None
        self._state: dict[str, Any] = {}
        self._supervisor = Supervisor(options.restart_policy, self._record, self._record_children)
        self._supervisor_metrics: SupervisorMetricsServer | None = None

    def _check_ports(self) -> tuple[list[int], int, int, int]:
        """Fail before starting anything when a chosen port is taken."""
        metrics_ports = []
        base = self.options.metrics_port
        for index, _job in enumerate(self.pipeline.jobs):
            port = base + index if base else 0
            metrics_ports.append(claim_port(port, "job metrics", "--metrics-port"))
        claim_port(self.options.kafka_port, "Kafka", "--kafka-port")
        prometheus_port = claim_port(self.options.prometheus_port, "Prometheus", "--prometheus-port")
        exporter_port = claim_port(self.options.exporter_port, "lag exporter", "--exporter-port")
        supervisor_port = claim_port(self.options.supervisor_port, "supervisor metrics", "--supervisor-port")
        return metrics_ports, prometheus_port, exporter_port, supervisor_port

    def _write_state(self) -> None:
        tmp = state_path(self.workdir).with_suffix(".tmp")
        tmp.write_text(json.dumps(self._state, indent=2))
        tmp.replace(state_path(self.workdir))

    def _record(self, process: ManagedProcess, kind: str) -> None:
        """Record a started process, or a restarted one in place of its last run (its new pid and start
        time: `down` from another terminal must find it)."""
        record = _process_record(process, kind)
        processes = self._state["processes"]
        index = next(
            (i for i, entry in enumerate(processes) if entry["name"] == process.name), len(processes)
        )
        processes[index : index + 1] = [record]
        for job in self._state.get("jobs", []):
            if job["name"] == process.name:
                job["pid"] = process.pid
        self._write_state()

    def _record_children(self) -> None:
        self._state["children"] = self._supervisor.records()
        self._write_state()

    def _start_tracked(self, process: ManagedProcess, kind: str) -> ManagedProcess:
        self._processes.append(process)
        return self._supervisor.start(process, kind)

    def up(self) -> dict[str, Any]:
        existing = read_state(self.workdir)
        if existing is not None:
            if supervisor_alive(existing):
                raise StreamstackError(
                    f"a local stack is already running (supervisor pid {existing['supervisor_pid']}, "
                    f"{state_path(self.workdir)}); stop it with `streamstack local down`"
                )
            raise StreamstackError(
                f"stale state file {state_path(self.workdir)} from a stack that did not stop cleanly; "
                "run `streamstack local down` to clean up"
            )
        ports = self._check_ports()
        run_dir = self.workdir / "run"
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        supervisor = ProcessIdentity.of(os.getpid())
        self._state = {
            "supervisor_pid": os.getpid(),
            "workdir": str(self.workdir),
            "started_at": time.time(),
            "ready": False,
            "processes": [],
        }
        if supervisor is not None:
            self._state["supervisor"] = supervisor.as_record()
        self._write_state()
        try:
            self._start_all(run_dir, *ports)
        except BaseException:
            self.down()
            raise
        return self._state

    def _start_all(
        self,
        run_dir: Path,
        metrics_ports: list[int],
        prometheus_port: int,
        exporter_port: int,
        supervisor_port: int,
    ) -> None:
        self._supervisor_metrics = SupervisorMetricsServer(self._supervisor, supervisor_port)
        self._supervisor_metrics.start()
        self._state["supervisor_metrics_url"] = self._supervisor_metrics.url
        # A broker that runs for hours: full JIT (C1 alone made it start in half the CPU but cost the
        # stack's broker 0.07 -> 0.10 cores over make bench-local's samples).
        kafka = LocalKafka(
            self.runtimes, run_dir / "kafka", port=self.options.kafka_port, java_options=()
        ).on_launch(lambda process: self._record(process, "kafka"))
        self._kafka = kafka
        kafka.start()
        self._state["kafka"] = {
            "bootstrap_servers": kafka.bootstrap_servers,
            "metrics_url": kafka.metrics_url,
            "log": str(kafka.log_path),
        }
        self._write_state()
        kafka.create_topics(self.pipeline.topics)
        producers = self._start_cdc_source(run_dir, kafka)

        self._state["jobs"] = []
        cluster_job_arguments = dev_stack_job_arguments()
        trigger_intervals = staggered_trigger_intervals(
            self.options.trigger_interval, len(self.pipeline.jobs)
        )
        for job, port, trigger_interval in zip(
            self.pipeline.jobs, metrics_ports, trigger_intervals, strict=True
        ):
            checkpoint_dir = run_dir / "checkpoints" / job.name
            checkpoint_dir.mkdir(parents=True)  # the lag exporter watches it from the start
            process = self._start_tracked(
                spark_job_process(
                    self.runtimes,
                    job.module,
                    name=job.name,
                    bootstrap_servers=kafka.bootstrap_servers,
                    checkpoint_dir=checkpoint_dir,
                    metrics_port=port,
                    log_path=run_dir / "logs" / f"{job.name}.log",
                    scratch_dir=run_dir / "scratch" / job.name,
                    trigger_interval=trigger_interval,
                    extra_args=(*cluster_job_arguments, *job.args),
                ),
                "job",
            )
            self._state["jobs"].append(
                {
                    "name": job.name,
                    "pid": process.pid,
                    "metrics_port": port,
                    "metrics_url": f"http://{LOOPBACK}:{port}/metrics",
                    "checkpoint_dir": str(checkpoint_dir),
                    "log": str(process.log_path),
                }
            )

        for producer in producers:
            process = self._start_tracked(
                producer_process(
                    self.runtimes,
                    producer,
                    bootstrap_servers=kafka.bootstrap_servers,
                    rate=self.options.rate,
                    log_path=run_dir / "logs" / f"{producer.name}.log",
                ),
                "producer",
            )
            self._state["producers"].append(
                {"name": producer.name, "topic": producer.topic, "log": str(process.log_path)}
            )

        exporter = self._start_tracked(
            lag_exporter_process(
                self.runtimes,
                bootstrap_servers=kafka.bootstrap_servers,
                port=exporter_port,
                checkpoint_roots={job["name"]: Path(job["checkpoint_dir"]) for job in self._state["jobs"]},
                log_path=run_dir / "logs" / "lag-exporter.log",
                source_flags=self._cdc.exporter_flags() if self._cdc is not None else (),
            ),
            "exporter",
        )
        self._state["exporter"] = {
            "metrics_url": f"http://{LOOPBACK}:{exporter_port}/metrics",
            "log": str(exporter.log_path),
        }

        prometheus = LocalPrometheus(
            self.runtimes,
            run_dir / "prometheus",
            {
                "streaming-jobs": [f"{LOOPBACK}:{port}" for port in metrics_ports],
                "lag-exporter": [f"{LOOPBACK}:{exporter_port}"],
                "local-supervisor": [self._supervisor_metrics.target],
                KAFKA_SCRAPE_JOB: [kafka.metrics_target],
                # Kafka Connect's JMX exporter (connector/task state, Debezium's streaming metrics).
                **(
                    {CONNECT_SCRAPE_JOB: [f"{LOOPBACK}:{self._cdc.connect.metrics_port}"]}
                    if self._cdc is not None and self._cdc.connect.metrics_port is not None
                    else {}
                ),
            },
            port=prometheus_port,
        ).on_launch(lambda process: self._record(process, "prometheus"))
        self._prometheus = prometheus
        prometheus.start()
        self._state["prometheus"] = {"url": prometheus.url, "log": str(prometheus.log_path)}
        self._state["ready"] = True
        self._write_state()

    def _start_cdc_source(self, run_dir: Path, kafka: LocalKafka) -> tuple[Producer, ...]:
        """With `changelog_source` database: PostgreSQL, Kafka Connect with the Debezium connector, and the
        application workload in place of the synthetic producers of the captured topics (at their rate).
        Returns the synthetic producers still to start."""
        self._state["producers"] = []
        producers = self.pipeline.producers
        if self.options.changelog_source == "synthetic":
            return producers
        if self.options.changelog_source not in CHANGELOG_SOURCES:
            raise StreamstackError(
                f"--changelog-source {self.options.changelog_source!r}: expected one of "
                f"{', '.join(CHANGELOG_SOURCES)}"
            )
        source = cdc_source()
        captured = [p for p in producers if set(p.flags) & set(source.topics)]
        if not captured:
            return producers  # no job of this run reads a captured table
        cdc = LocalCdcSource(
            self.runtimes,
            ensure_cdc(log=lambda _line: None),
            source,
            run_dir,
            bootstrap_servers=kafka.bootstrap_servers,
            record=self._record,
        )
        self._cdc = cdc
        cdc.start()
        self._state["cdc"] = {
            "postgres": f"{LOOPBACK}:{cdc.postgres.port}",
            "connect_url": cdc.connect.url,
            "connect_metrics_url": cdc.connect.metrics_url,
            "connector": source.connector_name,
            "log": str(cdc.connect.log_path),
        }
        rates = [
            p.arguments[i + 1] for p in captured for i, a in enumerate(p.arguments[:-1]) if a == "--rate"
        ]
        rate = float(rates[-1]) if rates else self.options.rate
        workload = self._start_tracked(
            cdc.workload_process(rate, run_dir / "logs" / f"{WORKLOAD_NAME}.log"), "producer"
        )
        self._state["producers"].append(
            {"name": WORKLOAD_NAME, "topic": ",".join(source.topics), "log": str(workload.log_path)}
        )
        return tuple(p for p in producers if p not in captured)

    def supervise(self) -> list[str]:
        """One round of supervision, without blocking: StreamstackError if Kafka or Prometheus died (the whole
        stack then stops), else restart what the policy says; one line per event."""
        cdc_services = self._cdc.services if self._cdc is not None else ()
        for service in (self._kafka, self._prometheus, *cdc_services):
            if service is not None and (exit_code := service.exit_code()) is not None:
                raise StreamstackError(_service_died(service, exit_code))
        return self._supervisor.tick()

    def down(self) -> None:
        """Stop producers, jobs and the lag exporter together, then Prometheus, the CDC source and Kafka;
        remove the state file."""
        stop_all(self._processes)
        if self._prometheus is not None:
            self._prometheus.stop()
        if self._cdc is not None:
            self._cdc.stop()
        if self._kafka is not None:
            self._kafka.stop()
        if self._supervisor_metrics is not None:
            self._supervisor_metrics.stop()
        state_path(self.workdir).unlink(missing_ok=True)


def _service_died(service: LocalService, exit_code: int) -> str:
    """Why the stack stops rather than restarting the service (README, `local up`)."""
    return (
        f"{service.title} exited with code {exit_code}, so the whole local stack stops (the supervisor "
        f"restarts jobs, producers and the lag exporter, not {service.title}); its log: {service.log_path}"
    )

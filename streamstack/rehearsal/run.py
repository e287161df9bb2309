"""`streamstack rehearse`: catalogue jobs run the way the cluster runs them, on one machine.

From the dev stack as `streamstack render` produces it: a secured broker with the rendered topics, KafkaUsers
and ACLs (`rehearsal.rendered_kafka` reads them, `rehearsal.kafka` runs them); a Spark standalone master and
worker whose executors cannot see driver-only volumes (`rehearsal.spark_cluster`); each chosen job's driver
started from its rendered SparkApplication (`rehearsal.jobs`), logged in as its own KafkaUser; the producers
that feed them, logged in as the load generator's user; the lag exporter, logged in as its user and reading
the checkpoints; a Prometheus that scrapes the broker's Strimzi metrics reporter, the drivers and the
exporter. After `--run-for` seconds, and once every query of every job has committed a batch (at most
`--timeout` seconds in all; sooner if a driver exits), it reports per job: running, batches committed, lag
seconds, ACL denials and failed tasks with the first executor exception; and every Kafka panel query of the
dashboards that returns no series. Exit 0 only if every job committed batches with no failed task and no
denial, and every Kafka panel has data.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from contracts.pipeline import load_pipeline
from streamstack.errors import StreamstackError
from streamstack.flags import Flag, add_flags
from streamstack.local.jobs import lag_exporter_process, producer_process
from streamstack.local.ports import LOOPBACK, free_port
from streamstack.local.process import ManagedProcess
from streamstack.local.prometheus import KAFKA_SCRAPE_JOB, LocalPrometheus
from streamstack.rehearsal.jobs import (
    RehearsedJob,
    claim_mounts,
    committed_batches,
    driver_process,
    first_error,
    rehearsed_job,
    secret_environment,
    task_failures,
)
from streamstack.rehearsal.kafka import RehearsalKafka
from streamstack.rehearsal.panels import kafka_panel_queries, without_data
from streamstack.rehearsal.rendered_kafka import users_by_secret, workload_kafka_users
from streamstack.rehearsal.spark_cluster import executor_logs, standalone_cluster
from streamstack.runtimes import Runtimes

PRODUCER_RATE = 20.0
WORK_DIR_MARKER = ".streamstack-rehearsal"
QUERY_SET_SETTLE_S = 20.0
EXPORTER_WORKLOAD = "Deployment/lag-exporter"


@dataclass
class JobReport:
    name: str
    kafka_user: str
    running: bool = False
    batches_committed: dict[str, int] = field(default_factory=dict)
    lag_seconds: float | None = None
    acl_denials: list[str] = field(default_factory=list)
    task_failures: list[str] = field(default_factory=list)
    cause: str | None = None
    rewritten: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        progressed = bool(self.batches_committed) and all(n > 0 for n in self.batches_committed.values())
        return self.running and progressed and not self.task_failures and not self.acl_denials


@dataclass
class Rehearsal:
    jobs: list[JobReport]
    kafka_panels_checked: int = 0
    kafka_panels_without_data: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        panels_ok = self.kafka_panels_checked > 0 and not self.kafka_panels_without_data
        return all(report.ok for report in self.jobs) and panels_ok

    def as_json(self) -> dict[str, Any]:
        return {
            "jobs": [{**asdict(report), "ok": report.ok} for report in self.jobs],
            "kafka_panels_checked": self.kafka_panels_checked,
            "kafka_panels_without_data": self.kafka_panels_without_data,
            "ok": self.ok,
        }


def _spark_applications(
    manifests: Sequence[Mapping[str, Any]], names: Sequence[str]
) -> list[Mapping[str, Any]]:
    applications = {m["metadata"]["name"]: m for m in manifests if m.get("kind") == "SparkApplication"}
    unknown = [name for name in names if name not in applications]
    if unknown:
        raise StreamstackError(
            f"--jobs: no SparkApplication {', '.join(unknown)} (rendered: {', '.join(applications)})"
        )
    return [applications[name] for name in names]


def _lag_seconds(exporter_url: str) -> dict[str, float]:
    """{checkpoint group: max lag seconds} from the exporter (`<job>/<query>` groups of the checkpoints)."""
    with urllib.request.urlopen(f"{exporter_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    lag: dict[str, float] = {}
    for match in re.finditer(r"^streamstack_lag_group_max_seconds\{([^}]*)\} (\S+)$", text, re.M):
        group = re.search(r'group="([^"]*)"', match.group(1))
        if group is not None:
            lag[group.group(1)] = max(lag.get(group.group(1), 0.0), float(match.group(2)))
    return lag


class _Progress:
    """Whether every query has committed a batch. A query's checkpoint (with an empty `commits/`) appears
    when it starts, and a driver starts its queries one after another: the set of queries has to stay the
    same for a while before "every query" means all of them."""

    def __init__(self, settle_seconds: float = QUERY_SET_SETTLE_S) -> None:
        self._settle_seconds = settle_seconds
        self._queries: set[str] = set()
        self._since = time.monotonic()

    def every_query_committed(self, checkpoint_roots: Mapping[str, Path]) -> bool:
        batches = {
            f"{job}/{query}": count
            for job, root in checkpoint_roots.items()
            for query, count in committed_batches(root).items()
        }
        started_jobs = {key.split("/", 1)[0] for key in batches}
        if set(batches) != self._queries:
            self._queries, self._since = set(batches), time.monotonic()
        settled = time.monotonic() - self._since >= self._settle_seconds
        return settled and started_jobs == set(checkpoint_roots) and all(n > 0 for n in batches.values())


class _Startable(Protocol):
    def start(self) -> object: ...

    def stop(self) -> None: ...


_StartableT = TypeVar("_StartableT", bound=_Startable)


@contextmanager
def _running(startable: _StartableT) -> Iterator[_StartableT]:
    startable.start()
    try:
        yield startable
    finally:
        startable.stop()


def fresh_work_dir(work_dir: Path, *, ours: bool = False) -> Path:
    """An empty work directory for one rehearsal: a rehearsal is a new cluster every time, and a broker or a
    checkpoint left by the last one would not fit it (Kafka refuses storage formatted for another cluster;
    checkpoints would point past the new topics' ends). Only the default directory (`ours`) or one a
    rehearsal made (it holds WORK_DIR_MARKER) is emptied; any other non-empty one is refused."""
    marker = work_dir / WORK_DIR_MARKER
    if work_dir.exists() and any(work_dir.iterdir()):
        if not (ours or marker.is_file()):
            raise StreamstackError(
                f"--work-dir {work_dir}: not empty and not a rehearsal's work directory; "
                "give an empty or new directory"
            )
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text("made by `streamstack rehearse`; emptied by the next rehearsal\n")
    return work_dir


def rehearse(
    runtimes: Runtimes,
    work_dir: Path,
    job_names: Sequence[str],
    run_for: float,
    timeout: float,
    *,
    own_work_dir: bool = False,
) -> Rehearsal:
    """Run the jobs `run_for` seconds and on until every query of every job has committed a batch (at most
    `timeout` seconds in all; sooner if a driver exits), then report each job, and the Kafka panels that the
    rehearsal's Prometheus answers empty."""
    from streamstack.render import render_stack  # noqa: PLC0415 (Pulumi loads in seconds: only here)

    rendered = render_stack("dev")
    manifests = rendered.manifests
    applications = _spark_applications(manifests, job_names)
    work_dir = fresh_work_dir(work_dir, ours=own_work_dir)
    workload_users = workload_kafka_users(manifests)
    catalogue = load_pipeline()
    volumes = work_dir / "volumes"
    driver_only = sorted(
        {
            volumes / mount.claim
            for application in applications
            for mount in claim_mounts({str(k): str(v) for k, v in application["spec"]["sparkConf"].items()})
            if mount.driver and not mount.executors
        }
    )
    reports = {
        str(a["metadata"]["name"]): JobReport(
            str(a["metadata"]["name"]), workload_users[f"SparkApplication/{a['metadata']['name']}"].name
        )
        for a in applications
    }
    with ExitStack() as stack:
        kafka = stack.enter_context(RehearsalKafka.from_rendered(runtimes, work_dir / "kafka", manifests))
        cluster = stack.enter_context(
            standalone_cluster(runtimes, work_dir / "spark", driver_only=driver_only, memory="2g")
        )
        jobs: dict[str, tuple[RehearsedJob, ManagedProcess]] = {}
        for application in applications:
            job = rehearsed_job(
                application,
                runtimes=runtimes,
                master_url=cluster.master_url,
                bootstrap_servers=kafka.bootstrap_servers,
                volumes_root=volumes,
                metrics_port=free_port(),
            )
            job.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            secrets = secret_environment(application)
            users = users_by_secret(kafka.users.values())
            credentials: dict[str, str] = {}
            for secret in set(secrets.values()):
                credentials.update(kafka.client_environment(users[secret].name))
            process = driver_process(job, credentials, work_dir / "logs" / f"{job.name}.log")
            reports[job.name].rewritten = list(job.rewritten)
            jobs[job.name] = (job, stack.enter_context(_running(process)))

        load_generator = users_by_secret(kafka.users.values())[str(rendered.outputs["loadGeneratorSecret"])]
        for producer_name in dict.fromkeys(p for name in job_names for p in catalogue.job(name).producers):
            producer = catalogue.producer(producer_name)
            process = producer_process(
                runtimes,
                producer,
                bootstrap_servers=kafka.bootstrap_servers,
                rate=PRODUCER_RATE,
                log_path=work_dir / "logs" / f"{producer.name}.log",
            )
            process.env = {**(process.env or {}), **kafka.client_environment(load_generator.name)}
            stack.enter_context(_running(process))

        exporter_port = free_port()
        exporter = lag_exporter_process(
            runtimes,
            bootstrap_servers=kafka.bootstrap_servers,
            port=exporter_port,
            checkpoint_roots={name: job.checkpoint_dir for name, (job, _) in jobs.items()},
            log_path=work_dir / "logs" / "lag-exporter.log",
        )
        exporter.env = {
            **(exporter.env or {}),
            **kafka.client_environment(workload_users[EXPORTER_WORKLOAD].name),
        }
        stack.enter_context(_running(exporter))
        prometheus = LocalPrometheus(
            runtimes,
            work_dir / "prometheus",
            {
                "streaming-jobs": [f"{LOOPBACK}:{job.metrics_port}" for job, _ in jobs.values()],
                "lag-exporter": [f"{LOOPBACK}:{exporter_port}"],
                KAFKA_SCRAPE_JOB: [kafka.kafka.metrics_target],
            },
        )
        stack.enter_context(_running(prometheus))

        started = time.monotonic()
        progress = _Progress()
        checkpoint_roots = {name: job.checkpoint_dir for name, (job, _) in jobs.items()}
        while time.monotonic() - started < max(run_for, timeout) and all(
            p.is_running() for _, p in jobs.values()
        ):
            if progress.every_query_committed(checkpoint_roots) and time.monotonic() - started >= run_for:
                break
            time.sleep(2)

        lag: dict[str, float] = {}
        with suppress(OSError, ValueError):
            lag = _lag_seconds(f"http://{LOOPBACK}:{exporter_port}")
        kafka_panels = kafka_panel_queries()
        empty_panels = [str(query) for query in without_data(prometheus.url, kafka_panels)]
        denials = kafka.acl_denials()
        for name, (job, process) in jobs.items():
            report = reports[name]
            report.running = process.is_running()
            report.batches_committed = committed_batches(job.checkpoint_dir)
            lags = [seconds for group, seconds in lag.items() if group.startswith(f"{name}/")]
            report.lag_seconds = max(lags) if lags else None
            report.acl_denials = denials.get(f"User:{report.kafka_user}", [])
            report.task_failures = task_failures(process.log_path)
            if not report.ok:
                report.cause = (
                    report.task_failures[0]
                    if report.task_failures
                    else first_error(process.log_path)
                    or next(filter(None, map(first_error, executor_logs(cluster))), None)
                )
    return Rehearsal(list(reports.values()), len(kafka_panels), empty_panels)


def render_report(rehearsal: Rehearsal) -> str:
    reports = rehearsal.jobs
    lines = [f"{'job':<22} {'running':<8} {'batches':<18} {'lag s':>6} {'denials':>8} {'failed tasks':>13}"]
    for report in reports:
        batches = ",".join(f"{n}" for n in report.batches_committed.values()) or "0"
        lag = "-" if report.lag_seconds is None else f"{report.lag_seconds:.0f}"
        lines.append(
            f"{report.name:<22} {'yes' if report.running else 'NO':<8} {batches:<18} {lag:>6} "
            f"{len(report.acl_denials):>8} {len(report.task_failures):>13}"
        )
        if report.cause:
            lines.append(f"  cause: {report.cause}")
        lines.extend(f"  denied: {denial}" for denial in report.acl_denials[:5])
    lines.extend(f"  Kafka panel without data: {panel}" for panel in rehearsal.kafka_panels_without_data)
    verdict = "every job progressed, every Kafka panel has data" if rehearsal.ok else "FAILED"
    return "\n".join([*lines, f"rehearsal: {verdict}"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    default_jobs = ",".join(job.name for job in load_pipeline().jobs)
    add_flags(
        parser,
        (
            Flag("--jobs", f"jobs to rehearse (default: {default_jobs})", default=default_jobs),
            Flag("--run-for", "seconds to run at least, before reporting (default: 60)", float, 60.0),
            Flag(
                "--timeout",
                "seconds at most, waiting for every query to commit a batch (default: 600)",
                float,
                600.0,
            ),
            Flag("--json", "print the report as JSON", action="store_true"),
            Flag("--work-dir", "default: .streamstack/rehearsal", Path),
        ),
    )


def main(args: argparse.Namespace, runtimes: Runtimes, default_work_dir: Path) -> int:
    names = [name.strip() for name in str(args.jobs).split(",") if name.strip()]
    rehearsal = rehearse(
        runtimes,
        args.work_dir or default_work_dir,
        names,
        args.run_for,
        args.timeout,
        own_work_dir=args.work_dir is None,
    )
    print(json.dumps(rehearsal.as_json(), indent=2) if args.json else render_report(rehearsal))
    return 0 if rehearsal.ok else 1

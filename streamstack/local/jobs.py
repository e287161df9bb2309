"""Launching PySpark jobs and producers as child processes, the way the cluster image runs them."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from contracts.durations import duration_seconds
from contracts.pipeline import Producer
from streamstack.local.ports import LOOPBACK
from streamstack.local.process import ManagedProcess
from streamstack.paths import REPO_ROOT, cache_dir
from streamstack.runtimes import Runtimes

LOCAL_DRIVER_JAVA_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m")
"""The JVM options of every local driver. The serial collector is the one the JVM picks by itself in the dev
stack's one-CPU pods (Pulumi.dev.yaml); compiling with C1 alone spares the drivers that share a laptop's cores
the C2 compilations, which pay off only at rates far above the stack's. Measured on the window job (README,
"Local stack at its defaults"): the driver's CPU until every query's first batch 37-40 -> 21-25 s, its CPU
per batch after that unchanged within noise.

With C1 alone the JVM reserves a code cache of 48 MB, not the 240 MB it reserves for C1 and C2 together. A
driver's compiled code outgrows 48 MB after a few minutes: the JVM then flushes compiled methods and compiles
them again, and the window job's driver filled it ("CodeCache is full. Compiler has been disabled."). So the
drivers reserve what a cluster's driver gets; only the code they compile is committed."""


def driver_class_archive(runtimes: Runtimes) -> Path:
    """Where this machine's local drivers find their class-data-sharing archive (JDK 17 dynamic CDS: the
    classes a driver loads, parsed and verified once and mapped by every later driver JVM), made by
    `streamstack.local.class_archive`. Named after everything the JVM checks it against (the JDK, Spark's
    jars, the connector and the jobs' jars, the JVM options), so a changed jar means a new archive, never a
    refused one."""
    digest = hashlib.sha256()
    for part in _class_archive_inputs(runtimes):
        digest.update(part.encode())
        digest.update(b"\0")
    return cache_dir() / "class-archives" / f"driver-{digest.hexdigest()[:16]}.jsa"


def _class_archive_inputs(runtimes: Runtimes) -> Iterator[str]:
    yield str(runtimes.java.resolve())
    yield from LOCAL_DRIVER_JAVA_OPTIONS
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin is not None:
        yield from sorted(jar.name for jar in (Path(spec.origin).parent / "jars").glob("*.jar"))
    for jar in (*runtimes.spark_kafka_jars, *sorted((cache_dir() / "jvm").glob("*.jar"))):
        status = jar.stat()
        yield f"{jar}:{status.st_size}:{status.st_mtime_ns}"


def local_driver_java_options(runtimes: Runtimes) -> tuple[str, ...]:
    """`LOCAL_DRIVER_JAVA_OPTIONS`, and the class archive once `make setup` has made it (without one a
    driver loads every class itself, as before)."""
    archive = driver_class_archive(runtimes)
    return (*LOCAL_DRIVER_JAVA_OPTIONS, *((f"-XX:SharedArchiveFile={archive}",) if archive.exists() else ()))


TRIGGER_STAGGER_SHARE = 0.02
"""How far apart the local jobs' trigger intervals are, as a share of the stack's interval (100 ms at 5 s)."""


def staggered_trigger_intervals(interval: str, count: int) -> list[str]:
    """`count` trigger intervals spread evenly around `interval`, `TRIGGER_STAGGER_SHARE` of it apart (7 jobs
    at 5 s: 4.7, 4.8, ... 5.3 s), one per local job.

    Spark starts a processing-time batch at the next multiple of the interval since the epoch, so jobs with
    equal intervals start every batch at the same instant. In a cluster each job has its own cores and that
    costs nothing; on one machine seven drivers then all start a batch at once on its two cores, and every
    batch waits for the others' (README, "Local stack at its defaults"). Intervals a little apart make the
    jobs' batch times drift past each other, as independent jobs' do."""
    interval_ms = round(duration_seconds(interval) * 1000)
    step = max(1, round(interval_ms * TRIGGER_STAGGER_SHARE))
    first = interval_ms - step * (count - 1) // 2
    return [f"{first + step * index} milliseconds" for index in range(count)]


def child_environment(runtimes: Runtimes) -> dict[str, str]:
    env = dict(os.environ)
    env["SPARK_LOCAL_IP"] = LOOPBACK
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["JAVA_HOME"] = str(runtimes.java.parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def spark_job_process(
    runtimes: Runtimes,
    module: str,
    *,
    name: str,
    bootstrap_servers: str,
    checkpoint_dir: Path,
    metrics_port: int,
    log_path: Path,
    scratch_dir: Path,
    trigger_interval: str = "2 seconds",
    driver_memory: str = "1g",
    extra_args: Sequence[str] = (),
    java_options: Sequence[str] | None = None,
) -> ManagedProcess:
    """The job's own entry point with local-only settings: master, loopback addresses, connector jars.

    `extra_args` carries the job's own flags (its topics and settings); `checkpoint_dir` is the job's
    checkpoint root, under which each of its queries keeps a directory; `java_options` replaces the
    driver JVM's (default `local_driver_java_options`).

    `scratch_dir` is the driver's own scratch space, as a driver pod has its own: Spark's local directory
    (`SPARK_LOCAL_DIRS`, which Spark on Kubernetes points at the pod's spark-local-dir volume), the JVM's
    and Python's temporary files (the chart's /tmp emptyDir). In the machine's shared /tmp, every driver
    killed without its shutdown hooks (a crash, SIGKILL) left its block manager directory and native
    libraries behind for good."""
    if java_options is None:
        java_options = local_driver_java_options(runtimes)
    scratch_dir.mkdir(parents=True, exist_ok=True)  # the JVM does not create its java.io.tmpdir
    argv = [
        sys.executable,
        "-m",
        module,
        "--query-name",
        name,
        "--master",
        "local[2]",
        "--bootstrap-servers",
        bootstrap_servers,
        "--checkpoint-dir",
        str(checkpoint_dir),
        "--metrics-host",
        LOOPBACK,
        "--metrics-port",
        str(metrics_port),
        "--trigger-interval",
        trigger_interval,
        "--extra-jars",
        ",".join(str(jar) for jar in runtimes.spark_kafka_jars),
        "--spark-conf",
        "spark.ui.enabled=false",
        "--spark-conf",
        f"spark.driver.memory={driver_memory}",
        "--spark-conf",
        f"spark.driver.host={LOOPBACK}",
        "--spark-conf",
        f"spark.driver.bindAddress={LOOPBACK}",
        "--spark-conf",
        "spark.driver.extraJavaOptions=" + " ".join((*java_options, f"-Djava.io.tmpdir={scratch_dir}")),
        *extra_args,
    ]
    env = child_environment(runtimes)
    env["SPARK_LOCAL_DIRS"] = env["TMPDIR"] = str(scratch_dir)
    return ManagedProcess(name, argv, log_path, env=env, cwd=REPO_ROOT)


def producer_process(
    runtimes: Runtimes, producer: Producer, *, bootstrap_servers: str, rate: float, log_path: Path
) -> ManagedProcess:
    """A producer of the catalogue: its topic and `rate`, then its own arguments (which may override the
    rate)."""
    argv = [
        sys.executable,
        "-m",
        producer.module,
        "--bootstrap-servers",
        bootstrap_servers,
        "--topic",
        producer.topic,
        "--rate",
        str(rate),
        *producer.arguments,
    ]
    return ManagedProcess(producer.name, argv, log_path, env=child_environment(runtimes), cwd=REPO_ROOT)


def lag_exporter_process(
    runtimes: Runtimes,
    *,
    bootstrap_servers: str,
    port: int,
    checkpoint_roots: Mapping[str, Path],
    log_path: Path,
    source_flags: Sequence[str] = (),
) -> ManagedProcess:
    """The lag exporter over every consumer group plus each job's checkpoint root (one group per query);
    `source_flags` (`--postgres-*`, no secret: the password is in a file) add the CDC replication slot."""
    argv = [
        sys.executable,
        "-m",
        "monitoring.lag_exporter",
        "--bootstrap-servers",
        bootstrap_servers,
        "--listen",
        f"{LOOPBACK}:{port}",
        "--refresh-interval",
        "5",
        "--window",
        "60",
    ]
    for name, root in checkpoint_roots.items():
        argv += ["--checkpoint-dir", f"{name}={root}"]
    argv += source_flags
    return ManagedProcess("lag-exporter", argv, log_path, env=child_environment(runtimes), cwd=REPO_ROOT)

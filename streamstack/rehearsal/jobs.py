"""A rendered SparkApplication as a driver process on the standalone cluster: the same program, arguments,
Spark conf and volumes, with only what must differ on one machine rewritten (and recorded).

What is kept: `spec.arguments` (every flag the chart writes), every `sparkConf` entry Spark reads outside
Kubernetes (`spark.executorEnv.*` among them), the driver's and executors' cores and memory, and which of the
PersistentVolumeClaims each side mounts: a claim the driver mounts and the executors do not is a driver-only
volume, hidden from the executors (`spark_cluster`). What is rewritten: the program's path in the image, the
Kafka bootstrap address, the metrics address, each claim's mount path (to a directory per claim), the master.
Kafka credentials come from the rehearsal's broker for the KafkaUser whose Secret the application references.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamstack.local.ports import LOOPBACK
from streamstack.local.process import ManagedProcess
from streamstack.paths import REPO_ROOT
from streamstack.rehearsal.spark_cluster import spark_environment
from streamstack.runtimes import Runtimes

IMAGE_APP_ROOT = "local:///opt/streamstack/app/"
_CLAIM_MOUNT = re.compile(
    r"^spark\.kubernetes\.(driver|executor)\.volumes\.persistentVolumeClaim\.([^.]+)\.mount\.path$"
)
_CLAIM_NAME = "spark.kubernetes.{side}.volumes.persistentVolumeClaim.{volume}.options.claimName"
# Settings only the Kubernetes scheduler backend reads: pods, volumes, secrets, images.
_KUBERNETES_ONLY = ("spark.kubernetes.",)


@dataclass(frozen=True)
class ClaimMount:
    claim: str
    mount_path: str
    driver: bool
    executors: bool


@dataclass(frozen=True)
class RehearsedJob:
    """How one SparkApplication runs here: `argv` for the driver, its environment apart from credentials,
    the local directory of each claim, and what was rewritten from the rendered spec."""

    name: str
    argv: tuple[str, ...]
    environment: Mapping[str, str]
    claims: tuple[ClaimMount, ...]
    claim_dirs: Mapping[str, Path]
    metrics_port: int
    rewritten: tuple[str, ...] = field(default=())

    @property
    def driver_only_dirs(self) -> tuple[Path, ...]:
        return tuple(self.claim_dirs[c.claim] for c in self.claims if c.driver and not c.executors)

    @property
    def checkpoint_dir(self) -> Path:
        """The directory the job's `--checkpoint-dir` now points at."""
        return Path(self.argv[self.argv.index("--checkpoint-dir") + 1])


def claim_mounts(spark_conf: Mapping[str, str]) -> tuple[ClaimMount, ...]:
    """The PersistentVolumeClaims the driver and the executors mount (the webhook-free sparkConf route)."""
    mounts: dict[str, dict[str, Any]] = {}
    for key, path in spark_conf.items():
        match = _CLAIM_MOUNT.match(key)
        if match is None:
            continue
        side, volume = match.groups()
        claim = spark_conf[_CLAIM_NAME.format(side=side, volume=volume)]
        entry = mounts.setdefault(claim, {"mount_path": path, "driver": False, "executors": False})
        entry["driver" if side == "driver" else "executors"] = True
    return tuple(ClaimMount(claim, **entry) for claim, entry in mounts.items())


def _replace_flag(arguments: list[str], flag: str, value: str, rewritten: list[str]) -> None:
    index = arguments.index(flag)
    rewritten.append(f"{flag} {arguments[index + 1]} -> {value}")
    arguments[index + 1] = value


def rehearsed_job(
    application: Mapping[str, Any],
    *,
    runtimes: Runtimes,
    master_url: str,
    bootstrap_servers: str,
    volumes_root: Path,
    metrics_port: int,
) -> RehearsedJob:
    """The driver's command line for a rendered SparkApplication (see the module docstring)."""
    spec = application["spec"]
    name = str(application["metadata"]["name"])
    spark_conf = {str(key): str(value) for key, value in (spec.get("sparkConf") or {}).items()}
    rewritten: list[str] = []

    main_file = str(spec["mainApplicationFile"])
    if not main_file.startswith(IMAGE_APP_ROOT):
        raise ValueError(f"SparkApplication {name}: mainApplicationFile {main_file} is not in the jobs image")
    program = REPO_ROOT / main_file.removeprefix(IMAGE_APP_ROOT)
    rewritten.append(f"mainApplicationFile {main_file} -> {program}")

    claims = claim_mounts(spark_conf)
    claim_dirs = {claim.claim: volumes_root / claim.claim for claim in claims}
    arguments = [str(argument) for argument in spec.get("arguments") or []]
    _replace_flag(arguments, "--bootstrap-servers", bootstrap_servers, rewritten)
    _replace_flag(arguments, "--metrics-host", LOOPBACK, rewritten)
    _replace_flag(arguments, "--metrics-port", str(metrics_port), rewritten)
    checkpoint_index = arguments.index("--checkpoint-dir") + 1
    for claim in claims:
        mounted = arguments[checkpoint_index]
        if mounted == claim.mount_path or mounted.startswith(claim.mount_path.rstrip("/") + "/"):
            local = str(claim_dirs[claim.claim]) + mounted.removeprefix(claim.mount_path.rstrip("/"))
            _replace_flag(arguments, "--checkpoint-dir", local, rewritten)

    driver, executor = spec.get("driver") or {}, spec.get("executor") or {}
    conf = {key: value for key, value in spark_conf.items() if not key.startswith(_KUBERNETES_ONLY)}
    conf.update(
        {
            "spark.driver.memory": str(driver.get("memory", "1g")),
            "spark.executor.memory": str(executor.get("memory", "1g")),
            "spark.executor.cores": str(executor.get("cores", 1)),
            "spark.cores.max": str(int(executor.get("instances", 1)) * int(executor.get("cores", 1))),
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.ui.enabled": "false",
        }
    )
    rewritten.append(f"master k8s (operator) -> {master_url}")
    argv = [sys.executable, str(program), *arguments, "--master", master_url]
    argv += ["--extra-jars", ",".join(str(jar) for jar in runtimes.spark_kafka_jars)]
    for key, value in sorted(conf.items()):
        argv += ["--spark-conf", f"{key}={value}"]
    environment = spark_environment(runtimes)
    environment["PYTHONPATH"] = str(REPO_ROOT)
    environment["PYTHONUNBUFFERED"] = "1"
    environment.update(
        {
            key.removeprefix("spark.kubernetes.driverEnv."): value
            for key, value in spark_conf.items()
            if key.startswith("spark.kubernetes.driverEnv.")
        }
    )
    return RehearsedJob(name, tuple(argv), environment, claims, claim_dirs, metrics_port, tuple(rewritten))


def secret_environment(application: Mapping[str, Any]) -> dict[str, str]:
    """{variable: secret name} of the driver's `spark.kubernetes.driver.secretKeyRef.*` variables."""
    prefix = "spark.kubernetes.driver.secretKeyRef."
    conf = application["spec"].get("sparkConf") or {}
    return {
        str(key).removeprefix(prefix): str(value).split(":", 1)[0]
        for key, value in conf.items()
        if str(key).startswith(prefix)
    }


def driver_process(job: RehearsedJob, credentials: Mapping[str, str], log_path: Path) -> ManagedProcess:
    environment = {**job.environment, **credentials}
    return ManagedProcess(job.name, job.argv, log_path, env=environment, cwd=REPO_ROOT)


def committed_batches(checkpoint_root: Path) -> dict[str, int]:
    """{query: batches committed} from each query's `commits/` under the job's checkpoint root."""
    return {
        query_dir.name: sum(1 for entry in (query_dir / "commits").iterdir() if entry.name.isdigit())
        for query_dir in sorted(checkpoint_root.iterdir())
        if (query_dir / "commits").is_dir()
    }


_TASK_FAILURE = re.compile(r"(Lost task \S+ in stage \S+.*|Task \S+ in stage \S+ failed .*)")


def task_failures(driver_log: Path) -> list[str]:
    """Every failed task the driver logged (TaskSetManager), each with the executor's exception."""
    try:
        text = driver_log.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [match.group(1)[:600] for match in _TASK_FAILURE.finditer(text)]


def first_error(log: Path) -> str | None:
    """The first exception a process logged (its cause when it died), if any."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        if re.search(r"\b(\w+\.)*\w*(Exception|Error)\b[:]", line):
            return line.strip()[:600]
    return None

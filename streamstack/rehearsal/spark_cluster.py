"""Spark as a cluster on one machine: a standalone master and a worker in JVMs of their own, executors
launched by the worker, drivers in processes of their own (`spark://` master URL).

The worker runs in a mount namespace of its own (`unshare --mount`): every directory in `driver_only` is
covered there by an empty, read-only tmpfs, so its executors see none of what the driver keeps in it. That
is a stateless job's checkpoint volume on a cluster, which the streaming-job chart mounts on the driver alone:
code that reads it from a task fails here as it would in a pod.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pyspark

from streamstack.errors import StreamstackError
from streamstack.local.ports import LOOPBACK, free_port
from streamstack.runtimes import Runtimes

SPARK_HOME = Path(pyspark.__file__).resolve().parent
READY_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class StandaloneCluster:
    master_url: str
    master_ui_url: str
    work_dir: Path
    driver_only: tuple[Path, ...]

    def state(self) -> dict[str, object]:
        """The master's view (workers, running and completed applications with their executors)."""
        with urllib.request.urlopen(f"{self.master_ui_url}/json/", timeout=5) as response:
            document: dict[str, object] = json.load(response)
        return document


def spark_environment(runtimes: Runtimes) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOCAL_HOSTNAME": LOOPBACK,
            "PYSPARK_PYTHON": sys.executable,
            "JAVA_HOME": str(runtimes.java.parent.parent),
            "SPARK_NO_DAEMONIZE": "1",
        }
    )
    return env


def _spark_class(main_class: str, *arguments: str) -> list[str]:
    return [str(SPARK_HOME / "bin" / "spark-class"), main_class, *arguments]


def _start(argv: Sequence[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("ab") as output:
        # A session of its own: the worker's executors join its process group, and stop with it.
        return subprocess.Popen(
            list(argv), stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


def _hiding_worker_argv(worker_argv: Sequence[str], driver_only: Sequence[Path]) -> list[str]:
    if not driver_only:
        return list(worker_argv)
    if shutil.which("unshare") is None:
        raise StreamstackError(
            "the rehearsal needs util-linux's unshare (mount namespaces) for driver-only volumes"
        )
    mounts = " && ".join(
        f"mount -t tmpfs -o ro,size=64k tmpfs {shlex.quote(str(path))}" for path in driver_only
    )
    script = f"{mounts} && exec {shlex.join(worker_argv)}"
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]


def _wait_for_worker(
    cluster: StandaloneCluster, master: subprocess.Popen[bytes], worker: subprocess.Popen[bytes]
) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for name, process in (("master", master), ("worker", worker)):
            if process.poll() is not None:
                raise StreamstackError(
                    f"the Spark {name} exited with {process.returncode}; see {cluster.work_dir}/{name}.log"
                )
        with suppress(OSError, ValueError):
            workers = cluster.state().get("workers", [])
            if isinstance(workers, list) and any(w.get("state") == "ALIVE" for w in workers):
                return
        time.sleep(0.5)
    raise StreamstackError(
        f"no Spark worker registered within {READY_TIMEOUT_S:.0f} s; see {cluster.work_dir}"
    )


@contextmanager
def standalone_cluster(
    runtimes: Runtimes,
    work_dir: Path,
    *,
    driver_only: Sequence[Path] = (),
    cores: int = 2,
    memory: str = "3g",
) -> Iterator[StandaloneCluster]:
    """A master and one worker (`cores`, `memory` for its executors) on free loopback ports; every directory
    in `driver_only` exists and is empty for the worker and its executors. Stops both, and every executor,
    on exit."""
    work_dir.mkdir(parents=True, exist_ok=True)
    for path in driver_only:
        path.mkdir(parents=True, exist_ok=True)
    env = spark_environment(runtimes)
    master_port, master_ui_port = free_port(), free_port()
    cluster = StandaloneCluster(
        master_url=f"spark://{LOOPBACK}:{master_port}",
        master_ui_url=f"http://{LOOPBACK}:{master_ui_port}",
        work_dir=work_dir,
        driver_only=tuple(driver_only),
    )
    master = _start(
        _spark_class(
            "org.apache.spark.deploy.master.Master",
            "--host",
            LOOPBACK,
            "--port",
            str(master_port),
            "--webui-port",
            str(master_ui_port),
        ),
        work_dir / "master.log",
        env,
    )
    worker: subprocess.Popen[bytes] | None = None
    try:
        worker_argv = _spark_class(
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            LOOPBACK,
            "--port",
            str(free_port()),
            "--webui-port",
            str(free_port()),
            "--cores",
            str(cores),
            "--memory",
            memory,
            "--work-dir",
            str(work_dir / "worker"),
            cluster.master_url,
        )
        worker = _start(_hiding_worker_argv(worker_argv, driver_only), work_dir / "worker.log", env)
        _wait_for_worker(cluster, master, worker)
        yield cluster
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)


def executor_logs(cluster: StandaloneCluster) -> list[Path]:
    """Every executor's stderr the worker kept (`<work>/worker/<app id>/<executor id>/stderr`)."""
    return sorted((cluster.work_dir / "worker").glob("*/*/stderr"))

"""The local drivers' class-data-sharing archive: `python -m streamstack.local.class_archive` (run by `make
setup`) makes it once per set of jars with a training run of a driver (`jobs.common.jvm_training`, a job's
session and a short stateful query, no broker), whose JVM writes the classes it loaded to the archive as it
exits (`-XX:ArchiveClassesAtExit`). Every local driver started afterwards maps it
(streamstack.local.jobs.local_driver_java_options) instead of loading, parsing and verifying those classes
again: measured in README, "Local stack at its defaults"."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import tempfile
from pathlib import Path

from streamstack.errors import StreamstackError
from streamstack.local.jobs import LOCAL_DRIVER_JAVA_OPTIONS, driver_class_archive, spark_job_process
from streamstack.local.ports import LOOPBACK
from streamstack.runtimes import Runtimes, locate

TRAINING_MODULE = "jobs.common.jvm_training"


def ensure_driver_class_archive(runtimes: Runtimes, timeout: float = 300.0) -> Path:
    """The archive for this machine's jars, made by a training run if it is missing (one at a time: a
    second caller waits for the first and finds it made); older archives are removed."""
    archive = driver_class_archive(runtimes)
    if archive.exists():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    with (archive.parent / "training.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not archive.exists():
            _train(runtimes, archive, timeout)
    for stale in archive.parent.glob("driver-*.jsa"):
        if stale != archive:
            stale.unlink(missing_ok=True)
    return archive


def _train(runtimes: Runtimes, archive: Path, timeout: float) -> None:
    with tempfile.TemporaryDirectory(prefix="training-", dir=archive.parent) as work:
        staged = Path(work) / archive.name
        training = spark_job_process(
            runtimes,
            TRAINING_MODULE,
            name="jvm-training",
            bootstrap_servers=f"{LOOPBACK}:9092",  # never connected to
            checkpoint_dir=Path(work),
            metrics_port=0,
            log_path=Path(work) / "training.log",
            scratch_dir=Path(work) / "scratch",
            extra_args=("--dead-letter-topic", "jvm-training-dead-letters"),  # never written to
            java_options=(*LOCAL_DRIVER_JAVA_OPTIONS, f"-XX:ArchiveClassesAtExit={staged}"),
        ).start()
        try:
            exit_code = training.wait_group(timeout)
        except subprocess.TimeoutExpired:
            training.stop()
            raise StreamstackError(
                f"the drivers' class archive: the training run took over {timeout:.0f} s: "
                f"{training.log_tail(10)}"
            ) from None
        if exit_code != 0 or not staged.exists():
            raise StreamstackError(
                f"the drivers' class archive: the training run exited with {exit_code} and "
                f"{'an' if staged.exists() else 'no'} archive: {training.log_tail(10)}"
            )
        staged.replace(archive)


def main() -> int:
    try:
        archive = ensure_driver_class_archive(locate())
    except StreamstackError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"drivers' class archive: {archive} ({archive.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

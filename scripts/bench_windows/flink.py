"""The PyFlink peer: its virtual environment, its Kafka connector jar and its rounds (see flink_job.py).

PyFlink 2.2.1 pins py4j, grpcio, protobuf, dill and numpy apart from constraints.txt, so it gets a venv of
its own, <cache>/pyflink-venv, built on first use from pyflink-requirements.txt (every package pinned with
its sha256, `pip install --require-hashes --no-deps`) and rebuilt when that file changes. Flink 2.2's Kafka
connector (flink-sql-connector-kafka 5.0.0-2.2: Maven Central has none for 2.3) is downloaded into
<cache>/maven and checked against its sha256 like every jar of runtimes.lock.json.

All rounds run in one subprocess (the driver, the mini-cluster's JVM it starts, the Python workers that
JVM starts), whose process tree's CPU is sampled every 50 ms; a round's interval runs from the first
record `classify` received (the wall time its first call notes) to the last count collected, and its busy
cores are the tree's CPU over that interval divided by its length, as for the Python peers.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.bench_windows.peers import PeerRun
from scripts.bench_windows.spark_side import CpuSampler, stat_cpu_seconds
from streamstack.paths import REPO_ROOT, cache_dir
from streamstack.runtimes.fetch import ensure_jars
from streamstack.runtimes.lock import MavenArtifact, jar_path

REQUIREMENTS = Path(__file__).with_name("pyflink-requirements.txt")
PYFLINK_VERSION = "2.2.1"
KAFKA_CONNECTOR = MavenArtifact(
    jar_set="pyflink-kafka",
    group="org.apache.flink",
    artifact="flink-sql-connector-kafka",
    version="5.0.0-2.2",
    sha256="5605c691d11a501382c383fecba37a7a552467da5ab7ba904ef5d6f3d62c5616",
)
PARALLELISM = 2  # the machine's two cores: two source subtasks, two Python workers
_STAMP = ".streamstack-requirements-sha256"


def tree_stats(root: int) -> dict[tuple[int, int], float]:
    """utime + stime of each live process of a tree, keyed by (pid, start time)."""
    found: dict[tuple[int, int], float] = {}
    pending = [root]
    while pending:
        pid = pending.pop()
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            started = int(stat[stat.rindex(")") + 2 :].split()[19])
            found[(pid, started)] = stat_cpu_seconds(stat)
            for task in Path(f"/proc/{pid}/task").iterdir():
                pending.extend(int(c) for c in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


class TreeSampler(CpuSampler):
    """CpuSampler over a process tree whose processes come and go: PyFlink's Python workers end with each
    job, before its last count is collected, so every process seen keeps the CPU it had when last seen
    (50 ms at most of a process's end is missed) and the tree's CPU never drops."""

    def __init__(self, pid: int) -> None:
        self.seen: dict[tuple[int, int], float] = {}
        super().__init__(pid)

    def read(self) -> float:
        self.seen.update(tree_stats(self.pid))
        return sum(self.seen.values())


def venv_dir(cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / "pyflink-venv"


def ensure_venv(log: Callable[[str], None], cache: Path | None = None) -> Path:
    """The PyFlink venv's python, building the venv if it is missing or its requirements changed."""
    venv = venv_dir(cache)
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = venv / _STAMP
    python = venv / "bin" / "python"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
        return python
    log(f"building the PyFlink venv {venv} from {REQUIREMENTS.name}")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--require-hashes",
            "--no-deps",
            "-r",
            str(REQUIREMENTS),
        ],
        check=True,
    )
    stamp.write_text(wanted + "\n")
    return python


def ensure_jar(log: Callable[[str], None], cache: Path | None = None) -> Path:
    cache = cache or cache_dir()
    ensure_jars(cache, [KAFKA_CONNECTOR], log)
    return jar_path(cache, KAFKA_CONNECTOR)


def peer_run(result: dict[str, Any], cpu_at: Callable[[float], float]) -> PeerRun:
    """A round's result line (flink_job.py) as a PeerRun, its CPU read from the samples at its ends."""
    start, end = float(result["first_record"]), float(result["last_counted"])
    run = PeerRun(
        records=int(result["records"]), seconds=end - start, cpu_seconds=cpu_at(end) - cpu_at(start)
    )
    for window_start, url, n in result["counts"]:
        run.counts[(int(window_start), str(url))] += int(n)
    run.dead_letters = Counter({str(reason): int(n) for reason, n in result["dead_letters"].items()})
    return run


def rounds(
    bootstrap: str,
    topic: str,
    *,
    count: int,
    grace_ms: int,
    java_home: Path,
    log: Callable[[str], None],
    parallelism: int = PARALLELISM,
    timeout_s: float = 3600,
) -> list[PeerRun]:
    """`count` rounds of the PyFlink job over `topic`, one subprocess; a PeerRun per round, in order."""
    python = ensure_venv(log)
    jar = ensure_jar(log)
    with tempfile.TemporaryDirectory(prefix="bench-flink-") as scratch:
        out = Path(scratch) / "rounds.jsonl"
        stderr_path = Path(scratch) / "stderr.log"
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO_ROOT),
            "JAVA_HOME": str(java_home),
            "FLINK_LOG_DIR": scratch,
        }
        env.pop("PYSPARK_PYTHON", None)
        command = [
            str(python),
            "-m",
            "scripts.bench_windows.flink_job",
            f"--bootstrap={bootstrap}",
            f"--topic={topic}",
            f"--jar={jar}",
            f"--rounds={count}",
            f"--parallelism={parallelism}",
            f"--grace-ms={grace_ms}",
            f"--out={out}",
        ]
        with stderr_path.open("w") as stderr:
            process = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
            try:
                with TreeSampler(process.pid) as sampler:
                    code = process.wait(timeout=timeout_s)
            finally:
                if process.poll() is None:
                    os.killpg(process.pid, 9)
                    process.wait()
        if code != 0:
            tail = stderr_path.read_text()[-3000:]
            raise RuntimeError(f"the PyFlink job exited with {code}:\n{tail}")
        lines = out.read_text().splitlines()
    if len(lines) != count:
        raise RuntimeError(f"the PyFlink job wrote {len(lines)} rounds of {count}")
    return [peer_run(json.loads(line), sampler.cpu_at) for line in lines]

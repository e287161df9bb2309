"""A driver asked to stop (SIGTERM, as the local supervisor and the kubelet send it; Ctrl-C) ends its queries
between batches and exits 0: the batch in flight finishes and is committed, nothing is logged as a failure.
Locally the signal reaches the driver's whole process group, Python and JVM; in the cluster only the JVM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from streamstack.paths import REPO_ROOT
from streamstack.runtimes import Runtimes
from tests.jobs.test_session import ARGS, driver_environment
from tests.kafka_helpers import wait_for

pytestmark = [pytest.mark.spark]

# A query whose batches take 2 s of its 4 s trigger interval (a Python foreachBatch, as user-view's and
# view-bursts'), run as the jobs run theirs; each batch leaves a file when it starts and when it ends.
DRIVER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from jobs.common.session import build_session
    from jobs.common.stopping import await_queries, stop_between_batches
    from jobs.sessionization.main import parse_args

    checkpoint, marks = Path(sys.argv[1]), Path(sys.argv[2])
    spark = build_session(parse_args(sys.argv[3:]).streaming)
    stop_between_batches(spark)

    def slow(batch, batch_id):
        (marks / f"{batch_id}.started").touch()
        batch.count()
        time.sleep(2)
        (marks / f"{batch_id}.done").touch()

    query = (
        spark.readStream.format("rate").option("rowsPerSecond", 5).load()
        .writeStream.foreachBatch(slow).option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="4 seconds").start()
    )
    await_queries(spark, [query])
    print("stopped")
    """
)


def jvm_of(driver: subprocess.Popen[str]) -> int:
    children = Path(f"/proc/{driver.pid}/task/{driver.pid}/children").read_text().split()
    java = [pid for pid in map(int, children) if Path(f"/proc/{pid}/exe").resolve().name == "java"]
    assert len(java) == 1, children
    return java[0]


def stop_mid_batch(
    runtimes: Runtimes, arguments: list[str], started: Path, signalled: str = "process group"
) -> tuple[int, str, str]:
    """Run a driver script (`python -c` arguments), SIGTERM it half a second after `started` appears, and
    return its exit code, stdout and stderr."""
    driver = subprocess.Popen(
        [sys.executable, "-c", *arguments],
        cwd=REPO_ROOT,
        env=driver_environment(runtimes),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(started.exists, timeout=120, what=f"{started.name} to appear")
        time.sleep(0.5)
        if signalled == "process group":
            os.killpg(driver.pid, signal.SIGTERM)
        else:
            os.kill(jvm_of(driver), signal.SIGTERM)
        stdout, stderr = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    return driver.returncode, stdout, stderr


@pytest.mark.parametrize("signalled", ["process group", "jvm only"])
def test_a_stopped_driver_finishes_its_batch_commits_it_and_exits_0(
    runtimes: Runtimes, tmp_path: Path, signalled: str
) -> None:
    checkpoint, marks = tmp_path / "checkpoint", tmp_path / "marks"
    marks.mkdir()
    returncode, stdout, stderr = stop_mid_batch(
        runtimes, [DRIVER, str(checkpoint), str(marks), *ARGS], marks / "1.started", signalled
    )

    assert (marks / "1.done").exists(), "the batch in flight finished"
    last = max(int(name) for name in os.listdir(checkpoint / "offsets") if name.isdigit())
    assert (checkpoint / "commits" / str(last)).exists(), f"batch {last} is planned but not committed"
    assert "terminated with error" not in stderr, stderr[-3000:]
    assert "1 streaming queries stopped between batches, 0 with a batch not committed" in stderr, stderr[
        -3000:
    ]
    assert returncode == 0, stderr[-3000:]
    assert stdout.strip().endswith("stopped")


# A query whose every batch spends 2 s being planned (its source's latestOffset, as a Kafka source asking slow
# brokers for their offsets), 6 s apart (so that it pauses between batches even on a loaded machine); its
# source leaves a file when a planning starts.
SLOW_PLANNING_DRIVER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from jobs.common.session import build_session
    from jobs.common.stopping import await_queries, stop_between_batches
    from jobs.sessionization.main import parse_args

    checkpoint, marks = Path(sys.argv[1]), sys.argv[2]
    spark = build_session(parse_args(sys.argv[3:]).streaming)
    stop_between_batches(spark)

    class SlowPlanning(DataSource):
        @classmethod
        def name(cls):
            return "slow_planning"

        def schema(self):
            return "value long"

        def streamReader(self, schema):
            return SlowPlanningReader(Path(self.options["marks"]))

    class SlowPlanningReader(DataSourceStreamReader):
        def __init__(self, marks):
            self.marks, self.plannings = marks, 0

        def initialOffset(self):
            return {"at": 0}

        def latestOffset(self):
            self.plannings += 1
            (self.marks / f"planning-{self.plannings}").touch()
            time.sleep(2)
            return {"at": self.plannings}

        def partitions(self, start, end):
            return [InputPartition(end["at"])]

        def read(self, partition):
            yield (partition.value,)

    spark.dataSource.register(SlowPlanning)
    query = (
        spark.readStream.format("slow_planning").option("marks", marks).load()
        .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="6 seconds").start()
    )
    await_queries(spark, [query])
    print("stopped")
    """
)


def test_a_driver_stopped_while_a_batch_is_planned_commits_that_batch(
    runtimes: Runtimes, tmp_path: Path
) -> None:
    """Spark cuts a batch whose query it finds stopped once the batch is planned (MicroBatchExecution.runBatch
    interrupts its own thread), so the stop waits for the batch to end before it stops the query."""
    checkpoint, marks = tmp_path / "checkpoint", tmp_path / "marks"
    marks.mkdir()
    returncode, stdout, stderr = stop_mid_batch(
        runtimes,
        [SLOW_PLANNING_DRIVER, str(checkpoint), str(marks), *ARGS],
        marks / "planning-3",
        # as in the cluster: the source's Python worker, in the driver's process group, stays up
        signalled="jvm only",
    )

    last = max(int(name) for name in os.listdir(checkpoint / "offsets") if name.isdigit())
    assert (checkpoint / "commits" / str(last)).exists(), f"batch {last} is planned but not committed"
    assert "1 streaming queries stopped between batches, 0 with a batch not committed" in stderr, stderr[
        -3000:
    ]
    assert "ERROR" not in stderr, stderr[-3000:]
    assert returncode == 0, stderr[-3000:]
    assert stdout.strip().endswith("stopped")


# A foreachBatch query of the jobs' own (start_foreach_batch_query) whose batch fails while the driver is
# stopping: with a Java error (a missing file, read through py4j as the jobs read their offset log), or
# interrupted in a Java call, as Spark interrupts a batch whose query was marked stopped while it was being
# planned (MicroBatchExecution.runBatch; the stop marks a query still in a batch after half its grace), and
# as a batch cut after the grace period is.
FAILING_DRIVER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from jobs.common.kafka_io import start_foreach_batch_query
    from jobs.common.offset_log import read_driver_file
    from jobs.common.session import build_session
    from jobs.common.stopping import await_queries, stop_between_batches
    from jobs.sessionization.main import parse_args

    marks, failure = Path(sys.argv[1]), sys.argv[2]
    config = parse_args(sys.argv[3:]).streaming
    spark = build_session(config)
    stop_between_batches(spark)

    def fails_while_stopping(batch, batch_id):
        if batch_id == 1:
            (marks / "started").touch()
            # past half the stop's grace period, when it marks a query still in its batch stopped
            time.sleep(6)
            if failure == "java error":
                read_driver_file(spark, str(marks / "missing"))
            else:
                spark._jvm.java.lang.Thread.currentThread().interrupt()
                spark._jvm.java.lang.Thread.sleep(1000)

    rate = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    query = start_foreach_batch_query(rate, config, query_name="fails", process=fails_while_stopping)
    await_queries(spark, [query])
    print("stopped")
    """
)


@pytest.mark.parametrize("failure", ["java error", "interruption"])
def test_a_batch_failing_while_the_driver_stops_is_reported_not_lost(
    runtimes: Runtimes, tmp_path: Path, failure: str
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    arguments = [*ARGS, "--checkpoint-dir", str(tmp_path / "checkpoints"), "--trigger-interval", "1 second"]
    returncode, stdout, stderr = stop_mid_batch(
        runtimes, [FAILING_DRIVER, str(marks), failure, *arguments], marks / "started"
    )

    assert "StackOverflowError" not in stderr, stderr[-3000:]
    if failure == "java error":
        # The query failed in its last batch: Spark says so, with the Java error; the driver exits non-zero.
        assert "terminated with error" in stderr, stderr[-3000:]
        assert "java.io.FileNotFoundException" in stderr, stderr[-3000:]
        assert returncode != 0, stderr[-3000:]
    else:
        # Spark reads an interruption while stopping as the stop itself; the batch runs at the next start.
        assert "terminated with error" not in stderr, stderr[-3000:]
        assert "0 streaming queries stopped between batches, 1 with a batch not committed" in stderr
        assert returncode == 0, stderr[-3000:]
        assert stdout.strip().endswith("stopped")


# The jobs' progress listener (metrics, no shadow groups here) on a query stopped mid-batch, detached before
# the driver exits as jobs.common.runner does; prints what its store knows and the session's listeners.
LISTENING_DRIVER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from jobs.common.kafka_io import start_foreach_batch_query
    from jobs.common.progress import serve_progress_metrics
    from jobs.common.session import build_session
    from jobs.common.stopping import await_queries, stop_between_batches
    from jobs.sessionization.main import parse_args

    marks = Path(sys.argv[1])
    config = parse_args(sys.argv[2:]).streaming
    spark = build_session(config)
    stop_between_batches(spark)
    progress = serve_progress_metrics(spark, config)

    def slow(batch, batch_id):
        if batch_id == 2:
            (marks / "started").touch()
            time.sleep(2)

    rate = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    query = start_foreach_batch_query(rate, config, query_name="listened", process=slow)
    await_queries(spark, [query])
    progress.detach(spark)
    listeners = spark._jsparkSession.streams().listListeners()
    state = progress.store.snapshot()["listened"]
    print(json.dumps({
        "active": state.active,
        "last_batch": state.progress.get("batchId"),
        "listeners": [listener.getClass().getSimpleName() for listener in listeners],
    }))
    """
)


def test_a_stopped_driver_hands_its_listener_every_event_and_leaves_none_undelivered(
    runtimes: Runtimes, tmp_path: Path
) -> None:
    """Spark delivers listener events on a thread of its own, after the fact: the driver's Python process
    must not exit while the last batch's progress and the query's termination are still on their way (they
    would go to a process that has gone, and Spark logs an ERROR with a stack trace for each)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    arguments = [
        *ARGS,
        *("--checkpoint-dir", str(tmp_path / "checkpoints"), "--trigger-interval", "1 second"),
        *("--metrics-port", "0", "--no-shadow-group"),
    ]
    returncode, stdout, stderr = stop_mid_batch(
        runtimes, [LISTENING_DRIVER, str(marks), *arguments], marks / "started"
    )

    assert returncode == 0, stderr[-3000:]
    assert "threw an exception" not in stderr, stderr[-3000:]
    seen = json.loads(stdout.strip().splitlines()[-1])
    assert seen["active"] is False, "the listener saw the query terminate"
    # The stop waited for the query's first pause: batch 2 overran its trigger, so batch 3 ran right after it.
    commits = tmp_path / "checkpoints" / "listened" / "commits"
    last_committed = max(int(name) for name in os.listdir(commits) if name.isdigit())
    assert seen["last_batch"] == last_committed >= 2, "the listener saw the progress of the last batch"
    assert "PythonStreamingQueryListenerWrapper" not in seen["listeners"]

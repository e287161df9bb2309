"""The session every job builds (jobs.common.session) in a driver JVM of its own, as a job starts locally:
its checkpoint files are written whole, under their final names, without Hadoop's `.crc` sidecars, and a
job's `--spark-conf` still overrides the jobs' settings."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jobs.common.session import CHECKPOINT_FS_CONF, STATE_STORE_DRAIN_PLUGIN, session_conf
from jobs.sessionization.main import parse_args
from streamstack.paths import REPO_ROOT
from streamstack.runtimes import Runtimes

pytestmark = [pytest.mark.spark]

ARGS = [
    *("--bootstrap-servers", "127.0.0.1:9", "--input-topic", "page-views", "--output-topic", "sessions"),
    *(
        "--dead-letter-topic",
        "dead-letters",
        "--session-gap",
        "30 seconds",
        "--watermark-delay",
        "10 seconds",
    ),
    *("--master", "local[1]", "--spark-conf", "spark.ui.enabled=false", "--checkpoint-dir", "/unused"),
]

# Two batches of a rate source into the noop sink in the session `build_session` makes; prints whether the
# SparkContext draws console progress bars and what its Hadoop configuration holds.
DRIVER = textwrap.dedent(
    """
    import json, sys
    from jobs.sessionization.main import parse_args
    from jobs.common.session import build_session

    config = parse_args(sys.argv[2:])
    spark = build_session(config.streaming)
    try:
        query = (
            spark.readStream.format("rate").option("rowsPerSecond", 5).load()
            .writeStream.format("noop").option("checkpointLocation", sys.argv[1])
            .trigger(processingTime="200 milliseconds").start()
        )
        while query.lastProgress is None or query.lastProgress["batchId"] < 1:
            query.awaitTermination(0.2)
        query.stop()
        print(json.dumps({"console_progress_bar": spark.sparkContext._jsc.sc().progressBar().isDefined()}))
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        keys = ("fs.file.impl", "fs.AbstractFileSystem.file.impl")
        print(json.dumps({key: hadoop.get(key) for key in keys}))
    finally:
        spark.stop()
    """
)


def driver_environment(runtimes: Runtimes) -> dict[str, str]:
    """The environment a job's driver starts in locally."""
    return {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "JAVA_HOME": str(runtimes.java.parent.parent),
    }


def run_driver(
    runtimes: Runtimes, script: str, checkpoint: Path, *arguments: str
) -> subprocess.CompletedProcess[str]:
    """A driver script run as a job's driver starts locally, in a JVM of its own, with the job's arguments."""
    driver = subprocess.run(
        [sys.executable, "-c", script, str(checkpoint), *ARGS, *arguments],
        cwd=REPO_ROOT,
        env=driver_environment(runtimes),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert driver.returncode == 0, driver.stderr[-3000:]
    return driver


def test_the_jobs_settings_come_first_and_the_command_line_overrides_them() -> None:
    default = session_conf(parse_args(ARGS).streaming)
    assert CHECKPOINT_FS_CONF.items() <= default.items()
    assert default["spark.ui.enabled"] == "false"

    checksummed = "spark.hadoop.fs.file.impl=org.apache.hadoop.fs.LocalFileSystem"
    overridden = session_conf(parse_args([*ARGS, "--spark-conf", checksummed]).streaming)
    assert overridden["spark.hadoop.fs.file.impl"] == "org.apache.hadoop.fs.LocalFileSystem"

    # Plugins a job names run beside the jobs' own, which still drains the state stores at a stop.
    assert default["spark.plugins"] == STATE_STORE_DRAIN_PLUGIN
    plugins = f"spark.plugins=com.example.Profiler, {STATE_STORE_DRAIN_PLUGIN}"
    named = session_conf(parse_args([*ARGS, "--spark-conf", plugins]).streaming)
    assert named["spark.plugins"] == f"{STATE_STORE_DRAIN_PLUGIN},com.example.Profiler"


def test_a_jobs_checkpoint_is_written_without_checksum_files_or_child_processes(
    runtimes: Runtimes, tmp_path: Path
) -> None:
    """Without Hadoop's native library, its raw local filesystem forks `chmod` for every file it creates and
    `readlink` for every status, several per checkpoint file: the driver's Flight Recorder shows none."""
    checkpoint = tmp_path / "checkpoint"
    recording = tmp_path / "driver.jfr"
    driver = run_driver(
        runtimes,
        DRIVER,
        checkpoint,
        "--spark-conf",
        f"spark.driver.extraJavaOptions=-XX:StartFlightRecording=dumponexit=true,filename={recording}",
    )

    shown, hadoop = map(json.loads, driver.stdout.strip().splitlines()[-2:])
    # A driver started from Python runs as pyspark's shell, which draws stage progress bars into the log;
    # spark-submit in the cluster does not.
    assert shown == {"console_progress_bar": False}
    assert hadoop == {
        "fs.file.impl": "streamstack.jvm.LocalCheckpointFileSystem",
        "fs.AbstractFileSystem.file.impl": "streamstack.jvm.LocalCheckpointFs",
    }
    started = subprocess.run(
        [str(runtimes.java.parent / "jfr"), "print", "--events", "jdk.ProcessStart", str(recording)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    commands = re.findall(r'command = "([^"]*)"', started)
    assert commands, "the recording holds the driver's start-up commands (getconf, setsid)"
    assert [command for command in commands if str(checkpoint) in command] == []
    files = sorted(str(path.relative_to(checkpoint)) for path in checkpoint.rglob("*") if path.is_file())
    assert {"metadata", "offsets/0", "offsets/1", "commits/0", "commits/1"} <= set(files)
    assert not [name for name in files if name.endswith((".crc", ".tmp"))], files
    # Each offset file is whole: the version line, the batch's metadata, the source's offset.
    lines = (checkpoint / "offsets" / "1").read_text().splitlines()
    assert lines[0] == "v1"
    assert "batchTimestampMs" in json.loads(lines[1])
    assert len(lines) == 3


# A RocksDB aggregation with the table queries' settings in the session `build_session` makes, run twice on
# one checkpoint: state snapshots every batch, maintenance every second. Each run is stopped as the jobs stop,
# between batches, and as soon as a batch has handed its total over (so while that batch still commits).
# Prints the state directory's files and the counts each run saw.
TABLE_STATE_DRIVER = textwrap.dedent(
    """
    import json, sys, threading, time
    from pathlib import Path
    from pyspark.sql import functions as F
    from jobs.common.session import TABLE_STATE_SETTINGS, build_session, sql_settings
    from jobs.common.stopping import stop_queries_between_batches
    from jobs.sessionization.main import parse_args

    checkpoint = Path(sys.argv[1])
    spark = build_session(parse_args(sys.argv[2:]).streaming)
    totals = []
    recorded = threading.Event()

    def record(batch, batch_id):
        totals.append((batch_id, batch.agg(F.sum("count")).first()[0] or 0))
        recorded.set()

    def run(until):
        with sql_settings(spark, TABLE_STATE_SETTINGS):
            query = (
                spark.readStream.format("rate").option("rowsPerSecond", 20).load()
                .groupBy((F.col("value") % 7).alias("key")).count()
                .writeStream.outputMode("complete").foreachBatch(record)
                .option("checkpointLocation", str(checkpoint)).trigger(processingTime="300 milliseconds")
                .start()
            )
        try:
            deadline = time.monotonic() + 90
            while not until() and time.monotonic() < deadline:
                recorded.wait(0.3)
                recorded.clear()
                if query.exception() is not None:
                    raise query.exception()
        finally:
            stop_queries_between_batches(spark)
        return {p["batchId"]: p["numInputRows"] for p in query.recentProgress}

    def snapshots():
        return sorted(str(p.relative_to(checkpoint)) for p in (checkpoint / "state").rglob("*.zip"))

    try:
        first = run(lambda: len(totals) >= 5 and snapshots())
        before = totals[-1][1]
        files = snapshots()
        second_from = len(totals)
        second = run(lambda: len(totals) > second_from)
        batch_id, after = totals[second_from]
    finally:
        spark.stop()
    threads = spark._jvm.java.lang.Thread.getAllStackTraces().keySet().toArray()
    print(json.dumps({
        "snapshots": files, "first_rows": sum(first.values()), "before": before,
        "after": after, "after_rows": second[batch_id],
        "maintenance_threads": sorted(t.getName() for t in threads if "maintenance" in t.getName()),
    }))
    """
)


def test_a_table_querys_state_is_snapshotted_and_restored(runtimes: Runtimes, tmp_path: Path) -> None:
    """RocksDB's state store uploads a snapshot of its state beside the changelogs (else every restart
    replays all changelogs since the first batch, and none is ever cleaned up) and loads it on a restart,
    both through the jobs' checkpoint filesystem's copies from and to the local filesystem."""
    settings = {
        "spark.sql.streaming.stateStore.maintenanceInterval": "1s",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": "1",
    }
    driver = run_driver(
        runtimes,
        TABLE_STATE_DRIVER,
        tmp_path / "checkpoint",
        *(argument for key, value in settings.items() for argument in ("--spark-conf", f"{key}={value}")),
    )
    assert "snapshot maintenance" not in driver.stderr, driver.stderr[-3000:]

    result = json.loads(driver.stdout.strip().splitlines()[-1])
    # Drained when the SparkContext stopped, before its RPC environment: a snapshot upload still running
    # then reports to the stopped state store coordinator and logs an error (at a job's every stop).
    assert result["maintenance_threads"] == []
    assert result["snapshots"], "a snapshot of the state store beside its changelogs"
    # The restarted query's first batch counts on from the state the first run left.
    assert result["before"] == result["first_rows"] > 0
    assert result["after"] == result["before"] + result["after_rows"]

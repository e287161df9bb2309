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

from jobs.common.session import CHECKPOINT_FS_CONF, session_conf
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

# Two batches of a rate source into the noop sink in the session `build_session` makes; prints what the
# SparkContext's Hadoop configuration holds.
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
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        keys = ("fs.file.impl", "fs.AbstractFileSystem.file.impl")
        print(json.dumps({key: hadoop.get(key) for key in keys}))
    finally:
        spark.stop()
    """
)


def test_the_jobs_settings_come_first_and_the_command_line_overrides_them() -> None:
    default = session_conf(parse_args(ARGS).streaming)
    assert CHECKPOINT_FS_CONF.items() <= default.items()
    assert default["spark.ui.enabled"] == "false"

    checksummed = "spark.hadoop.fs.file.impl=org.apache.hadoop.fs.LocalFileSystem"
    overridden = session_conf(parse_args([*ARGS, "--spark-conf", checksummed]).streaming)
    assert overridden["spark.hadoop.fs.file.impl"] == "org.apache.hadoop.fs.LocalFileSystem"


def test_a_jobs_checkpoint_is_written_without_checksum_files_or_child_processes(
    runtimes: Runtimes, tmp_path: Path
) -> None:
    """Without Hadoop's native library, its raw local filesystem forks `chmod` for every file it creates and
    `readlink` for every status, several per checkpoint file: the driver's Flight Recorder shows none."""
    checkpoint = tmp_path / "checkpoint"
    recording = tmp_path / "driver.jfr"
    environment = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "JAVA_HOME": str(runtimes.java.parent.parent),
    }
    driver = subprocess.run(
        [
            *(sys.executable, "-c", DRIVER, str(checkpoint), *ARGS, "--spark-conf"),
            f"spark.driver.extraJavaOptions=-XX:StartFlightRecording=dumponexit=true,filename={recording}",
        ],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert driver.returncode == 0, driver.stderr[-3000:]

    hadoop = json.loads(driver.stdout.strip().splitlines()[-1])
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

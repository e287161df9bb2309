"""A local job's driver as the stack starts it: the JVM that pyspark launches gets the local stack's JVM
options (settings given after the JVM started would be ignored without a word), reserves the code cache a
cluster's driver JVM gets, maps the drivers' class archive that `make setup` made (a JVM that refuses an
archive says so only in a warning, and runs without), and keeps its scratch space in a directory of its own,
as a driver pod does."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from contracts.durations import duration_seconds
from contracts.pipeline import load_pipeline
from streamstack.errors import StreamstackError
from streamstack.local.identity import ProcessIdentity, stat_fields
from streamstack.local.jobs import (
    LOCAL_DRIVER_JAVA_OPTIONS,
    driver_class_archive,
    spark_job_process,
    staggered_trigger_intervals,
)
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.pipeline import DEV_STACK_CONFIG, dev_stack_job_arguments
from streamstack.local.process import stop_all
from streamstack.runtimes import Runtimes
from tests.kafka_helpers import wait_for

pytestmark = [pytest.mark.spark]


def driver_jvm_command_lines(process_group: int) -> list[tuple[int, list[str]]]:
    """The pid and command line of every driver JVM in a process group (not spark-submit's short-lived
    launcher JVM, which builds the driver's command line first)."""
    found = []
    for process_dir in Path("/proc").glob("[0-9]*"):
        fields = stat_fields(int(process_dir.name))
        if fields is None or int(fields[2]) != process_group:
            continue
        identity = ProcessIdentity.of(int(process_dir.name))
        if identity is None:
            continue
        arguments = list(identity.cmdline)
        if arguments and arguments[0].endswith("/java") and "org.apache.spark.launcher.Main" not in arguments:
            found.append((int(process_dir.name), arguments))
    return found


def maps_file(pid: int, path: Path) -> bool:
    try:
        return str(path) in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def default_code_cache_bytes(java: Path) -> int:
    """What a JVM started without options reserves for compiled code, as it reports its own flags."""
    flags = subprocess.run(
        [str(java), "-XX:+PrintFlagsFinal", "-version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"\bReservedCodeCacheSize\s+=\s+(\d+)", flags)
    assert found, flags
    return int(found.group(1))


def code_cache_bytes(java: Path, pid: int) -> int:
    """A running JVM's code cache, from `jcmd <pid> Compiler.codecache` (one heap, or one per segment)."""
    report = subprocess.run(
        [str(java.parent / "jcmd"), str(pid), "Compiler.codecache"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    sizes = [int(kb) * 1024 for kb in re.findall(r"\bsize=(\d+)Kb", report)]
    assert sizes, report
    return sum(sizes)


def test_a_local_drivers_jvm_runs_with_the_local_java_options_and_maps_the_class_archive(
    runtimes: Runtimes, kafka: LocalKafka, tmp_path: Path, topic_name: str
) -> None:
    archive = driver_class_archive(runtimes)
    assert archive.exists(), f"{archive}: `make setup` makes it (python -m streamstack.local.class_archive)"
    kafka.create_topics([TopicSpec(name) for name in (topic_name, f"{topic_name}-out", f"{topic_name}-dead")])
    driver = spark_job_process(
        runtimes,
        "jobs.clickstream_windows",
        name="clickstream-windows",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint_dir=tmp_path / "checkpoints",
        metrics_port=0,
        log_path=tmp_path / "driver.log",
        scratch_dir=tmp_path / "scratch",
        extra_args=(
            *load_pipeline().job("clickstream-windows").setting_arguments,
            *("--input-topic", topic_name, "--output-topic", f"{topic_name}-out"),
            *("--dead-letter-topic", f"{topic_name}-dead"),
        ),
    ).start()
    try:
        wait_for(
            lambda: bool(driver_jvm_command_lines(driver.pid)) or not driver.is_running(),
            timeout=120,
            what="the driver's JVM",
        )
        assert driver.is_running(), driver.log_tail()
        [(jvm_pid, jvm)] = driver_jvm_command_lines(driver.pid)
        # Checked once the queries have started: a JVM that refuses the archive (a jar changed since it
        # was made) unmaps it while it starts.
        wait_for(
            lambda: bool(list((tmp_path / "checkpoints").glob("*/metadata"))) or not driver.is_running(),
            timeout=120,
            what="the queries started",
        )
        assert maps_file(jvm_pid, archive), driver.log_tail()
        # A driver pod's scratch space is its own and goes with the pod; a local driver killed without its
        # shutdown hooks left its block manager directory in the machine's /tmp for good.
        block_managers = list((tmp_path / "scratch").glob("blockmgr-*"))
        # With C1 alone the JVM reserves 48 MB, which a driver's compiled code outgrows in minutes; then it
        # flushes and compiles again, and stalls the driver's batches (README, "Local stack at its defaults").
        driver_code_cache = code_cache_bytes(runtimes.java, jvm_pid)
    finally:
        stop_all([driver])
    cluster_code_cache = default_code_cache_bytes(runtimes.java)
    assert driver_code_cache >= cluster_code_cache, (driver_code_cache, cluster_code_cache)
    assert f"-XX:SharedArchiveFile={archive}" in jvm
    assert block_managers, sorted(path.name for path in (tmp_path / "scratch").iterdir())
    assert f"-Djava.io.tmpdir={tmp_path / 'scratch'}" in jvm
    assert LOCAL_DRIVER_JAVA_OPTIONS
    assert all(option in jvm for option in LOCAL_DRIVER_JAVA_OPTIONS), jvm
    assert jvm.index(LOCAL_DRIVER_JAVA_OPTIONS[0]) < jvm.index("org.apache.spark.deploy.SparkSubmit")


def test_the_local_jobs_take_the_dev_stacks_shuffle_partitions(tmp_path: Path) -> None:
    dev = yaml.safe_load(DEV_STACK_CONFIG.read_text())["config"]["streamstack:jobDefaults"]
    assert dev_stack_job_arguments() == ("--shuffle-partitions", str(dev["shufflePartitions"]))
    config = tmp_path / "Pulumi.dev.yaml"
    config.write_text("config:\n  streamstack:jobDefaults:\n    shufflePartitions: two\n")
    with pytest.raises(StreamstackError, match=r"jobDefaults.shufflePartitions must be a positive integer"):
        dev_stack_job_arguments(config)


@pytest.mark.parametrize(
    ("interval", "count"), [("5 seconds", 7), ("5 seconds", 6), ("2 seconds", 2), ("1 minute", 3)]
)
def test_the_local_jobs_trigger_intervals_are_apart_and_average_the_stacks(interval: str, count: int) -> None:
    intervals = [duration_seconds(text) for text in staggered_trigger_intervals(interval, count)]
    assert len(set(intervals)) == count
    assert sum(intervals) / count == pytest.approx(duration_seconds(interval))
    assert max(intervals) - min(intervals) <= 0.02 * (count - 1) * duration_seconds(interval) + 1e-9


def test_a_single_local_job_keeps_the_stacks_trigger_interval() -> None:
    assert staggered_trigger_intervals("5 seconds", 1) == ["5000 milliseconds"]

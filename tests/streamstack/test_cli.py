"""`streamstack` as a user runs it: a detached local stack, its status, its teardown, and clear errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from contracts.durations import duration_seconds
from streamstack.local.pipeline import dev_stack_job_arguments, streaming_pipeline
from streamstack.local.process import process_group_alive
from streamstack.local.stack import read_state
from tests.kafka_helpers import metric_sum, scrape, wait_for

CLI = [sys.executable, "-m", "streamstack.cli"]


def streamstack(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def processes_mentioning(text: str) -> list[str]:
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in listing.splitlines() if text in line and "ps -eo" not in line]


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_job_runs_detached_reports_progress_and_stops_without_leftovers(tmp_path: Path) -> None:
    workdir = tmp_path / "stack"
    up = streamstack(
        "local", "up", "--detach", "--workdir", str(workdir),
        "--kafka-port", "0", "--prometheus-port", "0", "--metrics-port", "0", "--exporter-port", "0",
        "--supervisor-port", "0",
        "--rate", "50", "--trigger-interval", "5 seconds",
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        assert "Kafka bootstrap" in up.stdout and "Prometheus" in up.stdout
        expected_jobs = {job.name for job in streaming_pipeline().jobs}

        def statuses() -> dict[str, dict[str, Any]]:
            result = streamstack("local", "status", "--json", "--workdir", str(workdir), timeout=30)
            assert result.returncode == 0, result.stderr
            document: dict[str, Any] = json.loads(result.stdout)
            return {job["name"]: job for job in document["jobs"]}

        def all_processing() -> bool:
            jobs = statuses()
            assert set(jobs) == expected_jobs
            assert not [name for name, job in jobs.items() if job["state"] in ("exited", "failed")], jobs
            return all(
                job["state"] == "running" and (job["input_rows_total"] or 0) > 0 for job in jobs.values()
            )

        wait_for(all_processing, timeout=420, what="every job to process input", interval=3)
        status = json.loads(streamstack("local", "status", "--json", "--workdir", str(workdir)).stdout)
        host, port = status["kafka"]["bootstrap_servers"].split(":")
        assert host == "127.0.0.1"
        socket.create_connection((host, int(port)), timeout=5).close()
        assert status["prometheus"]["url"].startswith("http://127.0.0.1:")
        metrics_urls = {job["name"]: job["metrics_url"] for job in status["jobs"]}
        checkpoints = {job["name"]: Path(job["checkpoint_dir"]) for job in status["jobs"]}
        assert len(set(metrics_urls.values())) == len(expected_jobs)
        assert len(set(checkpoints.values())) == len(expected_jobs)

        output_topics = {
            job.name: job.args[job.args.index("--output-topic") + 1] for job in streaming_pipeline().jobs
        }

        def jobs_without_output() -> list[str]:
            consumer = KafkaConsumer(bootstrap_servers=status["kafka"]["bootstrap_servers"])
            try:
                return [
                    name
                    for name, topic in output_topics.items()
                    if sum(
                        consumer.end_offsets(
                            [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
                        ).values()
                    )
                    == 0
                ]
            finally:
                consumer.close()

        # Sessions and attributions are final only once the watermark passes them: allow for that.
        try:
            wait_for(
                lambda: not jobs_without_output(), timeout=300, what="every job to write output", interval=5
            )
        except TimeoutError as error:
            raise AssertionError(f"no output from {jobs_without_output()} (logs in {workdir})") from error
        assert all((checkpoints[name] / name / "commits").is_dir() for name in expected_jobs)
        # As in the dev cluster, each job runs with the dev stack's shuffle partitions, which are also the
        # state partitions of its main query (every catalogue job keeps state).
        partitions = int(dev_stack_job_arguments()[1])
        for name in expected_jobs:
            state_partitions = (checkpoints[name] / name / "state" / "0").iterdir()
            assert sorted(int(path.name) for path in state_partitions if path.name.isdigit()) == list(
                range(partitions)
            ), name

        # Each driver gets its own trigger interval around the stack's, so that the seven drivers on this
        # machine's two cores do not all start a batch at the same instant (streamstack.local.jobs).
        state = read_state(workdir)
        assert state is not None
        intervals = {}
        for job in state["jobs"]:
            argv = Path(f"/proc/{job['pid']}/cmdline").read_bytes().decode().split("\0")
            intervals[job["name"]] = duration_seconds(argv[argv.index("--trigger-interval") + 1])
        assert len(set(intervals.values())) == len(expected_jobs), intervals
        assert sum(intervals.values()) / len(intervals) == pytest.approx(5.0), intervals
        assert all(4.5 <= seconds <= 5.5 for seconds in intervals.values()), intervals

        # The lag exporter sees each job's main query twice: via its shadow group and its checkpoint.
        exporter_url = status["exporter"]["metrics_url"]

        def exporter_sees_every_job() -> bool:
            samples = scrape(exporter_url)
            return samples.get("streamstack_lag_exporter_up") == 1 and all(
                metric_sum(
                    samples, "streamstack_lag_committed_offset", source="shadow", group=f"streamstack-{name}"
                )
                > 0
                and metric_sum(
                    samples, "streamstack_lag_committed_offset", source="checkpoint", group=f"{name}/{name}"
                )
                > 0
                for name in expected_jobs
            )

        wait_for(exporter_sees_every_job, timeout=120, what="the lag exporter to see every job", interval=3)

        human = streamstack("local", "status", "--workdir", str(workdir))
        assert human.returncode == 0 and all(name in human.stdout for name in expected_jobs)
        state = json.loads((workdir / "state.json").read_text())
    finally:
        down = streamstack("local", "down", "--workdir", str(workdir))
    assert down.returncode == 0, down.stderr
    assert "stopped" in down.stdout
    assert not (workdir / "state.json").exists()
    pids = [int(state["supervisor_pid"])] + [int(entry["pid"]) for entry in state["processes"]]
    assert all(not process_group_alive(pid) for pid in pids)
    assert processes_mentioning(str(workdir)) == []
    # `down` stops each driver's queries between batches (jobs.common.stopping), none fails.
    for name in expected_jobs:
        log = (workdir / "run" / "logs" / f"{name}.log").read_text()
        assert "terminated with error" not in log, name
        # A query thread killed by an error Spark did not catch (a StackOverflowError in its stop check).
        assert 'Exception in thread "stream execution thread' not in log, name
        # Every listener event delivered before the driver exited (ProgressMetrics.detach).
        assert "PythonStreamingQueryListenerWrapper threw an exception" not in log, name
        assert re.search(r"Stopping: \d+ streaming queries stopped between batches", log), name


def test_unknown_job_is_one_line_error(tmp_path: Path) -> None:
    result = streamstack("local", "up", "--workdir", str(tmp_path), "--jobs", "clickstream-windows,nope")
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert "--jobs: unknown job nope" in line and "clickstream-windows" in line
    assert not (tmp_path / "state.json").exists()


def test_unknown_argument_is_one_line_error() -> None:
    result = streamstack("local", "up", "--no-such-flag")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "unrecognized arguments: --no-such-flag" in result.stderr


def test_port_in_use_is_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = streamstack(
            "local", "up", "--workdir", str(tmp_path), "--kafka-port", str(port), "--run-for", "1"
        )
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()[-1:]
    assert f"port {port} on 127.0.0.1 is in use (Kafka)" in line and "--kafka-port" in line
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "state.json").exists()


def test_missing_java_is_one_line_error(tmp_path: Path) -> None:
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    env["PATH"] = str(empty_bin)
    assert shutil.which("java", path=env["PATH"]) is None
    result = streamstack("local", "up", "--workdir", str(tmp_path / "stack"), env=env)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "java" in result.stderr.lower() and "Traceback" not in result.stderr


def test_stale_state_file_is_reported_and_cleaned_by_down(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    state = {
        "supervisor_pid": dead.pid,
        "workdir": str(tmp_path),
        "processes": [],
        "jobs": [],
        "producers": [],
    }
    (tmp_path / "state.json").write_text(json.dumps(state))

    status = streamstack("local", "status", "--workdir", str(tmp_path))
    assert status.returncode == 1
    assert len(status.stderr.strip().splitlines()) == 1
    assert "stale state file" in status.stderr and "streamstack local down" in status.stderr

    up = streamstack("local", "up", "--workdir", str(tmp_path), "--kafka-port", "0")
    assert up.returncode == 1 and "stale state file" in up.stderr

    down = streamstack("local", "down", "--workdir", str(tmp_path))
    assert down.returncode == 0
    assert not (tmp_path / "state.json").exists()


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
def test_ctrl_c_stops_a_foreground_stack_and_everything_it_started(tmp_path: Path) -> None:
    workdir = tmp_path / "stack"
    output = (tmp_path / "up.out").open("wb")
    foreground = subprocess.Popen(
        [*CLI, "local", "up", "--workdir", str(workdir), "--kafka-port", "0", "--prometheus-port", "0",
         "--metrics-port", "0", "--exporter-port", "0", "--supervisor-port", "0", "--rate", "50",
         "--jobs", "clickstream-windows"],
        stdout=output, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:

        def job_running() -> bool:
            result = streamstack("local", "status", "--json", "--workdir", str(workdir), timeout=30)
            return result.returncode == 0 and json.loads(result.stdout)["jobs"][0]["state"] == "running"

        wait_for(job_running, timeout=180, what="the foreground stack's job to run", interval=2)
        state = json.loads((workdir / "state.json").read_text())
        foreground.send_signal(signal.SIGINT)
        assert foreground.wait(timeout=120) == 0
    finally:
        if foreground.poll() is None:
            foreground.kill()
            foreground.wait()
        output.close()
    assert "stopped" in (tmp_path / "up.out").read_text()
    assert all(not process_group_alive(int(entry["pid"])) for entry in state["processes"])
    assert not (workdir / "state.json").exists()
    assert processes_mentioning(str(workdir)) == []

"""`python -m monitoring.lag_exporter` as a child process: serves /metrics over HTTP, stops cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.conftest import repo_root
from tests.kafka_helpers import produce, scrape, wait_for
from tests.monitoring.checkpoints import write_query_checkpoint

pytestmark = pytest.mark.integration


def _children(pid: int) -> list[int]:
    """Pids whose parent is `pid` (from /proc)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            children.append(int(entry.name))
    return children


def _series(name: str, group: str, source: str, topic: str) -> str:
    """A key of `scrape()`: labels in sorted order."""
    return f'{name}{{group="{group}",partition="0",source="{source}",topic="{topic}"}}'


def _listening_url(log: Path, process: subprocess.Popen[bytes], timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(r"serving (http://127\.0\.0\.1:\d+/metrics)", log.read_text())
        if match:
            return match.group(1)
        if process.poll() is not None:
            raise AssertionError(f"the exporter exited with {process.returncode}: {log.read_text()}")
        time.sleep(0.1)
    raise TimeoutError(f"the exporter did not start listening: {log.read_text()}")


def test_the_entry_point_serves_metrics_and_stops_on_sigterm(
    kafka: LocalKafka, topic_name: str, tmp_path: Path
) -> None:
    kafka.create_topics([TopicSpec(topic_name, partitions=1)])
    produce(kafka.bootstrap_servers, topic_name, [(None, b"x")] * 6)
    consumer = KafkaConsumer(
        bootstrap_servers=kafka.bootstrap_servers, group_id=f"{topic_name}-g", enable_auto_commit=False
    )
    consumer.commit({TopicPartition(topic_name, 0): OffsetAndMetadata(2, "", -1)})
    consumer.close(autocommit=False)
    write_query_checkpoint(tmp_path / "ck" / "q", {0: {topic_name: {0: 5}}}, committed=[0])
    log = tmp_path / "exporter.log"
    command = [
        sys.executable,
        "-m",
        "monitoring.lag_exporter",
        "--bootstrap-servers",
        kafka.bootstrap_servers,
        "--listen",
        "127.0.0.1:0",
        "--refresh-interval",
        "0.5",
        "--window",
        "2",
        "--group-allow",
        f"{topic_name}.*",
        "--checkpoint-dir",
        f"ck={tmp_path / 'ck'}",
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(command, cwd=repo_root(), stdout=output, stderr=subprocess.STDOUT)
    try:
        url = _listening_url(log, process)
        group_lag = _series("streamstack_lag_records", f"{topic_name}-g", "group", topic_name)
        checkpoint_lag = _series("streamstack_lag_records", "ck/q", "checkpoint", topic_name)
        wait_for(lambda: group_lag in scrape(url), timeout=30, what="the group's lag on /metrics")
        samples = scrape(url)
        assert samples["streamstack_lag_exporter_up"] == 1
        assert samples[group_lag] == 4
        assert samples[checkpoint_lag] == 1
        assert _children(process.pid) == []
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            returncode = process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert returncode == 0, log.read_text()
    assert "stopped" in log.read_text()
    with pytest.raises(ProcessLookupError):
        os.kill(process.pid, 0)


def test_a_bad_flag_exits_2_naming_the_flag() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitoring.lag_exporter",
            "--bootstrap-servers",
            "k:1",
            "--refresh-interval",
            "0",
        ],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--refresh-interval" in result.stderr

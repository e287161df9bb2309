"""Spark as the cluster runs it: executors in JVMs of their own that do not see a driver-only volume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from streamstack.paths import REPO_ROOT
from streamstack.rehearsal.spark_cluster import spark_environment, standalone_cluster
from streamstack.runtimes import Runtimes

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

OFFSETS = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795000000000,"conf":{}}\n{"users":{"0":12,"1":7}}\n'


def _probe(runtimes: Runtimes, master_url: str, checkpoint: Path) -> dict[str, object]:
    env = spark_environment(runtimes)
    env["PYTHONPATH"] = str(REPO_ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "tests.streamstack.rehearsal.volume_probe", master_url, checkpoint.as_uri()],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_executors_cannot_read_a_driver_only_volume_but_the_offset_log_is_read(
    runtimes: Runtimes, tmp_path: Path
) -> None:
    driver_only = tmp_path / "volumes" / "user-view"
    shared = tmp_path / "volumes" / "clickstream-windows"
    for volume in (driver_only, shared):
        (volume / "offsets").mkdir(parents=True)
    with standalone_cluster(runtimes, tmp_path / "spark", driver_only=[driver_only], memory="1g") as cluster:
        (driver_only / "offsets" / "0").write_text(OFFSETS)
        (shared / "offsets" / "0").write_text(OFFSETS)
        hidden = _probe(runtimes, cluster.master_url, driver_only)
        visible = _probe(runtimes, cluster.master_url, shared)
        applications = cluster.state()["completedapps"]
    # The old way (a Spark job) fails on the executor, as it does on a cluster; the driver-side read works.
    assert "FAILED_READ_FILE.FILE_NOT_EXIST" in str(hidden["executor_error"])
    assert hidden["driver_read"] == {"users": {"0": 12, "1": 7}}
    # A volume every executor reaches (a stateful job's) is readable both ways: the hiding is per volume.
    assert visible["executor_read"] == '{"users":{"0":12,"1":7}}'
    assert visible["driver_read"] == {"users": {"0": 12, "1": 7}}
    assert isinstance(applications, list)
    assert len(applications) == 2

"""`streamstack rehearse`: two jobs of the rendered dev stack whose executors keep state (user-view's tables,
clickstream-windows' windows) in the checkpoint volume they mount, on a secured broker and a Spark standalone
cluster, make progress with no failed task and no ACL denial, every Kafka panel of the
dashboards has data from the broker's Strimzi metrics reporter, and nothing is left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamstack.paths import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def _processes_under(path: Path) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmdline:
            found.append(f"{pid}: {cmdline[:200]}")
    return found


def test_rehearse_two_jobs_whose_executors_keep_state(tmp_path: Path) -> None:
    work_dir = tmp_path / "rehearsal"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamstack.cli",
            "rehearse",
            "--jobs",
            "user-view,clickstream-windows",
            "--run-for",
            "30",
            "--timeout",
            "600",
            "--json",
            "--work-dir",
            str(work_dir),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rehearsal = json.loads(done.stdout)
    assert rehearsal["kafka_panels_checked"] >= 5 and rehearsal["kafka_panels_without_data"] == []
    reports = {report["name"]: report for report in rehearsal["jobs"]}
    assert set(reports) == {"user-view", "clickstream-windows"}
    for report in reports.values():
        assert report["ok"] and report["running"]
        assert report["batches_committed"] and min(report["batches_committed"].values()) >= 1
        assert report["acl_denials"] == [] and report["task_failures"] == []
        assert any(
            line.startswith("--bootstrap-servers streamstack-kafka-bootstrap") for line in report["rewritten"]
        )
    assert reports["user-view"]["lag_seconds"] is not None
    assert _processes_under(work_dir) == []

    # Every executor that kept state runs the plugin that stops its state stores when it is stopped (jobs/jvm
    # StateStoreDrain): the driver's Spark settings and the executor's classpath bring it. Whether a drain
    # ends before the worker's SIGTERM ends the executor is a race, as in a pod, so only its start is certain.
    executor_logs = [log.read_text() for log in (work_dir / "spark" / "worker").glob("app-*/*/stderr")]
    keeping_state = [text for text in executor_logs if "State Store maintenance task started" in text]
    assert keeping_state, f"{len(executor_logs)} executor logs, none with a state store"
    plugin = "Initialized executor component for plugin streamstack.jvm.StateStoreDrain"
    assert all(plugin in text for text in keeping_state)

"""Alerts delivered: Debian's prometheus-alertmanager 0.25 runs the routing the dev stack deploys
(infra/alertmanager.py, via streamstack.local.alertmanager.stack_routing) with its webhook pointed at a
receiver in this test; only the notification waits are shortened.

- Inhibition: a critical and a warning alert about the same query, and a warning about another query, posted
  through Alertmanager's API: the critical one and the other query's warning arrive, the muted warning does
  not (Alertmanager reports it suppressed, inhibited by the critical one).
- Delivery: our Prometheus evaluates monitoring/rules/streamstack-jobs.yaml (only StreamstackJobDisappeared's
  `for` shortened, in a copy) and sends to that Alertmanager; a running Spark job (the window job, driver and
  JVM) is scraped, then killed with SIGKILL, and the job-down alert arrives at the webhook with the query's
  labels, through the critical receiver.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.alertmanager import CRITICAL_RECEIVER, WARNING_RECEIVER
from streamstack.local.alertmanager import LocalAlertmanager, stack_routing
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.ports import LOOPBACK
from streamstack.local.prometheus import LocalPrometheus
from streamstack.paths import REPO_ROOT
from streamstack.runtimes import Runtimes
from tests.jobs.streaming_helpers import start_window_job

JOB_RULES = REPO_ROOT / "monitoring" / "rules" / "streamstack-jobs.yaml"
JOB_DOWN_ALERT = "StreamstackJobDisappeared"
QUERY = "user-view"
JOB_QUERY = "clickstream-windows"


class Webhook:
    """A webhook receiver on 127.0.0.1: every notification Alertmanager POSTs, as parsed JSON."""

    def __init__(self) -> None:
        self.received: queue.Queue[dict[str, Any]] = queue.Queue()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                received.put(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}/alerts"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.seen: list[tuple[str, str, dict[str, str]]] = []  # (receiver, status, labels) per alert

    def wait_for(self, predicate: Callable[[str, str, dict[str, str]], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if any(predicate(*seen) for seen in self.seen):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                notification = self.received.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            for alert in notification["alerts"]:
                self.seen.append((notification["receiver"], alert["status"], alert["labels"]))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    receiver = Webhook()
    try:
        yield receiver
    finally:
        receiver.close()


@pytest.fixture
def alertmanager(runtimes: Runtimes, webhook: Webhook, tmp_path: Path) -> Iterator[LocalAlertmanager]:
    """The dev stack's routing with its webhook secret set to the test's receiver."""
    config = stack_routing("dev", {"webhook": webhook.url}, group_wait="1s", group_interval="1s")
    manager = LocalAlertmanager(runtimes, tmp_path / "alertmanager", config).start()
    try:
        yield manager
    finally:
        manager.stop()


def alert(name: str, severity: str, query: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "labels": {"alertname": name, "severity": severity, "query": query},
        "annotations": {"summary": f"{name} for {query}"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(minutes=5)).isoformat(),
    }


def test_a_critical_alert_mutes_the_warnings_of_its_query_only(
    alertmanager: LocalAlertmanager, webhook: Webhook
) -> None:
    alertmanager.post_alerts(
        [
            alert("StreamstackQueryFailed", "critical", QUERY),
            alert("StreamstackJobBackpressure", "warning", QUERY),
            alert("StreamstackJobBackpressure", "warning", "sessionization"),
        ]
    )

    def arrived(name: str, query: str, receiver: str) -> Callable[[str, str, dict[str, str]], bool]:
        return lambda r, status, labels: (labels["alertname"], labels["query"], r) == (name, query, receiver)

    assert webhook.wait_for(arrived("StreamstackQueryFailed", QUERY, CRITICAL_RECEIVER), 30), webhook.seen
    assert webhook.wait_for(arrived("StreamstackJobBackpressure", "sessionization", WARNING_RECEIVER), 30), (
        webhook.seen
    )
    states = {
        (item["labels"]["alertname"], item["labels"]["query"]): item["status"]
        for item in alertmanager.alerts()
    }
    muted = states[("StreamstackJobBackpressure", QUERY)]
    assert muted["state"] == "suppressed" and muted["inhibitedBy"], states
    assert states[("StreamstackJobBackpressure", "sessionization")]["state"] == "active", states
    # Two more group intervals: the muted warning never arrives.
    assert not webhook.wait_for(arrived("StreamstackJobBackpressure", QUERY, WARNING_RECEIVER), 3), (
        webhook.seen
    )


def job_rules_with_short_for(directory: Path) -> Path:
    """streamstack-jobs.yaml with only the job-down alert's `for` shortened (its expression, labels and
    annotations untouched); production keeps its 5 minutes."""
    document = yaml.safe_load(JOB_RULES.read_text(encoding="utf-8"))
    (rule,) = [r for group in document["groups"] for r in group["rules"] if r.get("alert") == JOB_DOWN_ALERT]
    assert rule["for"] == "5m" and rule["labels"]["severity"] == "critical"
    rule["for"] = "1s"
    path = directory / JOB_RULES.name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
def test_a_killed_job_alerts_at_the_webhook(
    runtimes: Runtimes,
    kafka: LocalKafka,
    alertmanager: LocalAlertmanager,
    webhook: Webhook,
    tmp_path: Path,
) -> None:
    """A real job (the window job's driver and its JVM, as `local up` runs it) is scraped, then killed
    with SIGKILL as a node failure would: its job-down alert arrives at the webhook."""
    topics = ("alert-page-views", "alert-page-views-per-url", "alert-dead-letters")
    kafka.create_topics(
        [
            TopicSpec(topics[0], partitions=2),
            TopicSpec(topics[1], partitions=2, compact=True),
            TopicSpec(topics[2], partitions=1),
        ]
    )
    job, metrics_url = start_window_job(
        runtimes,
        kafka.bootstrap_servers,
        checkpoint_dir=tmp_path / "checkpoints",
        log_path=tmp_path / "job.log",
        topics=topics,
        settings=("--shuffle-partitions", "2"),
    )
    target = metrics_url.removeprefix("http://").removesuffix("/metrics")
    prometheus = LocalPrometheus(
        runtimes,
        tmp_path / "prometheus",
        {"streaming-jobs": [target]},
        scrape_interval="1s",
        rule_files=[job_rules_with_short_for(tmp_path)],
        alertmanagers=[alertmanager.address],
    )
    try:
        prometheus.start()
        deadline = time.monotonic() + 240
        while not prometheus.query(f'streamstack_query_active{{query="{JOB_QUERY}"}} == 1'):
            assert job.is_running(), f"the job exited early; see {job.log_path}"
            assert time.monotonic() < deadline, (
                f"Prometheus never scraped the job's metrics; see {job.log_path}"
            )
            time.sleep(1)
        assert not prometheus.query(f'ALERTS{{alertname="{JOB_DOWN_ALERT}"}}'), "fired while the job ran"

        os.killpg(job.pid, signal.SIGKILL)
        job.stop(timeout=30)

        def job_down(receiver: str, status: str, labels: dict[str, str]) -> bool:
            return (labels.get("alertname"), labels.get("query"), status) == (
                JOB_DOWN_ALERT,
                JOB_QUERY,
                "firing",
            )

        assert webhook.wait_for(job_down, 60), webhook.seen
        ((receiver, _, labels),) = [seen for seen in webhook.seen if job_down(*seen)]
        assert receiver == CRITICAL_RECEIVER
        assert labels == {"alertname": JOB_DOWN_ALERT, "query": JOB_QUERY, "severity": "critical"}
    finally:
        prometheus.stop()
        job.stop(timeout=30)

"""The local supervisor's Prometheus endpoint: how often it restarted each child, and whether each runs.

`streamstack_local_child_restarts_total{child, kind}` is the local counterpart of kube-state-metrics'
`kube_pod_container_status_restarts_total`; StreamstackContainerRestarting (monitoring/rules/
streamstack-platform.yaml) reads either. Every child has a series from the start, at 0, so that the first
restart is an increase Prometheus sees.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streamstack.local.ports import LOOPBACK
from streamstack.local.supervision import Supervisor

RESTARTS_METRIC = "streamstack_local_child_restarts"
RUNNING_METRIC = "streamstack_local_child_running"


class SupervisorCollector(Collector):
    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor

    def collect(self) -> Iterator[Metric]:
        restarts = CounterMetricFamily(
            RESTARTS_METRIC, "Times the local supervisor restarted the child.", labels=["child", "kind"]
        )
        running = GaugeMetricFamily(
            RUNNING_METRIC,
            "1 while the child runs; 0 while it waits for a restart, or after it failed or completed.",
            labels=["child", "kind"],
        )
        for child in list(self._supervisor.children):
            restarts.add_metric([child.name, child.kind], child.restarts)
            running.add_metric([child.name, child.kind], 1.0 if child.state == "running" else 0.0)
        yield restarts
        yield running


class SupervisorMetricsServer:
    """Serves the collector on 127.0.0.1:`port` from a daemon thread (the supervisor's loop never serves)."""

    def __init__(self, supervisor: Supervisor, port: int) -> None:
        self.port = port
        self._registry = CollectorRegistry()
        self._registry.register(SupervisorCollector(supervisor))
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def target(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.target}/metrics"

    def start(self) -> None:
        self._server, self._thread = start_http_server(self.port, addr=LOOPBACK, registry=self._registry)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

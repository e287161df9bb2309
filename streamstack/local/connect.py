"""A local Kafka Connect worker in distributed mode, with Debezium's PostgreSQL connector as a plugin.

Connect runs from the Kafka 4.3.1 jars of the lock's "kafka" set (connect-runtime, connect-api, connect-json,
connect-transforms and their dependencies are already the broker's classpath); Debezium's jars (the
"debezium" set) are its one plugin, isolated in `<workdir>/plugins/debezium-postgres` (links to the cache).
Its identity and storage topics are the catalogue's (`sources.cdc.connect`, contracts/cdc.py): the same
group and topics as the cluster's KafkaConnect. The REST API listens on 127.0.0.1 only. The worker runs
the Prometheus JMX exporter as a Java agent (the lock's "connect-jmx-exporter" jar) on its own 127.0.0.1
port (`metrics_url`), with the rules the cluster's KafkaConnect gets (contracts/connect_metrics.py): the
same `kafka_connect_connector_status`, `kafka_connect_connector_task_status` and `debezium_metrics_*` series
locally and in the cluster. The local broker
serves PLAINTEXT to every local client, so Connect connects as the jobs do; the worker's offsets are
flushed every second, so a restarted worker repeats at most about a second of changes.

    connect = LocalConnect(runtimes, cdc, workdir, kafka.bootstrap_servers, source.connect).start()
    connect.put_connector(source.connector_name, debezium_connector_config(source, ...))
    connect.wait_until_running(source.connector_name)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from contracts.cdc import CdcSource, ConnectCluster, connect_worker_config, debezium_connector_config
from contracts.connect_metrics import jmx_exporter_rules
from streamstack.errors import StreamstackError
from streamstack.local.jobs import child_environment
from streamstack.local.ports import LOOPBACK, claim_port
from streamstack.local.postgres import LocalPostgres
from streamstack.local.process import ManagedProcess
from streamstack.local.service import LocalService
from streamstack.paths import REPO_ROOT
from streamstack.runtimes import Runtimes
from streamstack.runtimes.lock import CdcRuntimes

CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectDistributed"
PLUGIN_NAME = "debezium-postgres"
# The application workload that writes to the captured tables (the synthetic changelog producer's mix).
WORKLOAD_MODULE = "jobs.producers.cdc_workload"
WORKLOAD_NAME = "cdc-workload"
# Prometheus' scrape job of the worker's JMX exporter (a cluster's PodMonitor scrapes the same names).
CONNECT_SCRAPE_JOB = "kafka-connect"

_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRefs = stdout
rootLogger.appenderRef.stdout.ref = STDOUT
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


class LocalConnect(LocalService):
    """Writes the worker config and the plugin directory, starts the worker, waits for its REST API;
    creates or updates connectors and reads their state; restarts on the same config."""

    name = "connect"
    title = "Kafka Connect"
    port_flag = "--connect-port"
    stop_timeout = 30.0

    def __init__(
        self,
        runtimes: Runtimes,
        cdc: CdcRuntimes,
        workdir: Path,
        bootstrap_servers: str,
        cluster: ConnectCluster,
        *,
        port: int = 0,
        metrics_port: int = 0,
        heap: str = "384m",
    ) -> None:
        super().__init__(runtimes, workdir, port)
        self.cdc = cdc
        self.bootstrap_servers = bootstrap_servers
        self.cluster = cluster
        self.heap = heap
        self.config_path = workdir / "connect-distributed.properties"
        self.metrics_config_path = workdir / "jmx-exporter.yml"
        # The JMX exporter's port; none when the lock has no agent jar.
        self.metrics_port: int | None = (
            None
            if cdc.jmx_exporter_agent is None
            else claim_port(metrics_port, f"{self.title} metrics", "--connect-metrics-port")
        )

    @property
    def metrics_url(self) -> str | None:
        """The JMX exporter's /metrics (None without the agent)."""
        return None if self.metrics_port is None else f"http://{LOOPBACK}:{self.metrics_port}/metrics"

    def listening_ports(self) -> dict[str, int]:
        ports = super().listening_ports()
        if self.metrics_port is not None:
            ports["metrics port"] = self.metrics_port
        return ports

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def worker_properties(self) -> dict[str, str]:
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.cluster.group_id,
            "config.storage.topic": self.cluster.config_storage_topic,
            "offset.storage.topic": self.cluster.offset_storage_topic,
            "status.storage.topic": self.cluster.status_storage_topic,
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            **connect_worker_config(),
            # Locally 1 s (the cluster's worker: 10 s), so a restarted worker replays little.
            "offset.flush.interval.ms": "1000",
            # One worker: when it restarts (a crash, a kill) its tasks come back as soon as the group sees
            # the old member gone (session.timeout.ms), not after the 5 minutes kept for a returning worker.
            "scheduled.rebalance.max.delay.ms": "0",
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "2000",
            "listeners": f"http://{LOOPBACK}:{self.port}",
            "rest.advertised.host.name": LOOPBACK,
            "rest.advertised.port": str(self.port),
            "plugin.path": str(self.workdir / "plugins"),
            # Every plugin (Kafka's and Debezium's) has ServiceLoader manifests: no class scanning at start.
            "plugin.discovery": "service_load",
        }

    def _write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        plugin = self.workdir / "plugins" / PLUGIN_NAME
        plugin.mkdir(parents=True, exist_ok=True)
        for jar in self.cdc.debezium_jars:
            link = plugin / jar.name
            if not link.is_symlink():
                link.symlink_to(jar)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.worker_properties().items()))
        (self.workdir / "connect-log4j2.properties").write_text(_LOG4J2)
        self.metrics_config_path.write_text(yaml.safe_dump(jmx_exporter_rules(), sort_keys=False))

    def _argv(self) -> list[str]:
        classpath = os.pathsep.join(str(jar) for jar in self.runtimes.kafka_classpath)
        return [
            str(self.runtimes.java),
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'connect-log4j2.properties'}",
            *self._agent_options(),
            "-cp",
            classpath,
            CONNECT_MAIN,
            str(self.config_path),
        ]

    def _agent_options(self) -> list[str]:
        """`-javaagent:<jar>=127.0.0.1:<port>:<rules>`: the JMX exporter serving /metrics on loopback."""
        if self.cdc.jmx_exporter_agent is None or self.metrics_port is None:
            return []
        return [
            f"-javaagent:{self.cdc.jmx_exporter_agent}={LOOPBACK}:{self.metrics_port}:{self.metrics_config_path}"
        ]

    def start(self, timeout: float = 120.0) -> LocalConnect:
        self._write_config()
        self._launch(self._argv())
        self._wait_until_ready(timeout)
        return self

    def restart(self, timeout: float = 120.0) -> LocalConnect:
        """Start the stopped worker again: it rejoins its group and resumes its connectors from the offsets
        in the offset topic."""
        self._relaunch()
        self._wait_until_ready(timeout)
        return self

    def _wait_until_ready(self, timeout: float) -> None:
        """The REST API answers and the worker has joined its group (GET /connectors answers 200)."""
        assert self._process is not None
        self._process.wait_until_http_ready(self.title, f"{self.url}/connectors", timeout, poll=0.5)

    # --- the REST API ----------------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: object | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw) if raw else None
            except json.JSONDecodeError:
                return error.code, raw.decode(errors="replace")

    def put_connector(self, name: str, config: Mapping[str, str], timeout: float = 60.0) -> None:
        """Create the connector or update its config (PUT /connectors/<name>/config); retried while the
        worker rebalances (409) or its herder is not ready yet."""
        deadline = time.monotonic() + timeout
        while True:
            status, body = self._request("PUT", f"/connectors/{name}/config", dict(config))
            if status in (200, 201):
                return
            if status not in (409, 500, 503) or time.monotonic() > deadline:
                raise StreamstackError(f"Kafka Connect refused connector {name} (HTTP {status}): {body}")
            time.sleep(1.0)

    def connector_status(self, name: str) -> dict[str, Any] | None:
        """GET /connectors/<name>/status: the connector's and its tasks' states (None: no such connector)."""
        status, body = self._request("GET", f"/connectors/{name}/status")
        if status == 404:
            return None
        if status != 200 or not isinstance(body, dict):
            raise StreamstackError(f"Kafka Connect status of {name} failed (HTTP {status}): {body}")
        return body

    def wait_until_running(self, name: str, timeout: float = 120.0) -> dict[str, Any]:
        """Until the connector and all its tasks are RUNNING; a FAILED one raises with its trace."""
        deadline = time.monotonic() + timeout
        status: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            status = self.connector_status(name)
            if status is not None:
                states = [status["connector"]["state"], *(task["state"] for task in status["tasks"])]
                failed = [
                    item.get("trace", "")
                    for item in (status["connector"], *status["tasks"])
                    if item["state"] == "FAILED"
                ]
                if failed:
                    raise StreamstackError(f"connector {name} failed: {failed[0][:1500]}")
                if status["tasks"] and all(state == "RUNNING" for state in states):
                    return status
            time.sleep(0.5)
        raise StreamstackError(f"connector {name} not running after {timeout:.0f} s: {status}")

    def delete_connector(self, name: str) -> None:
        status, body = self._request("DELETE", f"/connectors/{name}")
        if status not in (204, 404):
            raise StreamstackError(f"deleting connector {name} failed (HTTP {status}): {body}")


class LocalCdcSource:
    """The database-backed changelogs: PostgreSQL with the application's tables, Kafka Connect with the
    catalogue's Debezium connector, and the application workload (jobs.producers.cdc_workload) as a child
    for the supervisor. `record` is told of every server process as soon as it starts."""

    def __init__(
        self,
        runtimes: Runtimes,
        cdc: CdcRuntimes,
        source: CdcSource,
        run_dir: Path,
        *,
        bootstrap_servers: str,
        record: Callable[[ManagedProcess, str], object],
    ) -> None:
        self.runtimes = runtimes
        self.source = source
        self.postgres = LocalPostgres(runtimes, cdc, run_dir / "postgres", source.database).on_launch(
            lambda process: record(process, "postgres")
        )
        self.connect = LocalConnect(
            runtimes, cdc, run_dir / "connect", bootstrap_servers, source.connect
        ).on_launch(lambda process: record(process, "connect"))

    def start(self) -> LocalCdcSource:
        self.postgres.start()
        schema = subprocess.run(
            [sys.executable, "-m", WORKLOAD_MODULE, "--schema-only"],
            env=self.workload_environment(),
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if schema.returncode != 0:
            raise StreamstackError(
                f"creating the application's tables failed: {schema.stderr.strip()[-500:]}"
            )
        self.connect.start()
        config = debezium_connector_config(
            self.source,
            hostname=LOOPBACK,
            port=self.postgres.port,
            user=self.postgres.user,
            password=self.postgres.password,
        )
        self.connect.put_connector(self.source.connector_name, config)
        self.connect.wait_until_running(self.source.connector_name)
        return self

    def workload_environment(self) -> dict[str, str]:
        """libpq's environment for the workload: the password reaches it here, never on its argv."""
        return {
            **child_environment(self.runtimes),
            "PGHOST": LOOPBACK,
            "PGPORT": str(self.postgres.port),
            "PGDATABASE": self.source.database,
            "PGUSER": self.postgres.user,
            "PGPASSWORD": self.postgres.password,
        }

    def workload_process(self, rate: float, log_path: Path) -> ManagedProcess:
        argv = [sys.executable, "-m", WORKLOAD_MODULE, "--rate", str(rate)]
        return ManagedProcess(WORKLOAD_NAME, argv, log_path, env=self.workload_environment(), cwd=REPO_ROOT)

    def exporter_flags(self) -> list[str]:
        """The lag exporter's flags for the connector's replication slot: the catalogue's database and slot,
        the password through the server's password file (never on the command line)."""
        return [
            "--postgres-host",
            LOOPBACK,
            "--postgres-port",
            str(self.postgres.port),
            "--postgres-user",
            self.postgres.user,
            "--postgres-database",
            self.source.database,
            "--postgres-slot",
            self.source.slot_name,
            "--postgres-password-file",
            str(self.postgres.password_path),
        ]

    @property
    def services(self) -> tuple[LocalService, ...]:
        return (self.postgres, self.connect)

    def stop(self) -> None:
        """Connect first (its task stops reading the slot), then PostgreSQL, whose data goes with the run."""
        self.connect.stop()
        self.postgres.stop()
        self.postgres.remove_data()

"""A single-node KRaft Kafka (broker and controller in one JVM) on 127.0.0.1.

By default one PLAINTEXT listener. With `SecuredListeners` the broker also gets secured client listeners, for
testing clients against real authentication and encryption: `SASL_PLAINTEXT` (SCRAM) when SCRAM is enabled,
`SSL` when a keystore is given, `SASL_SSL` with both. The controller and inter-broker listeners stay
PLAINTEXT, and so does the bootstrap address every other caller uses. SCRAM users are created through the
admin API after start-up (AlterUserScramCredentials, what `kafka-configs --alter --add-config SCRAM-...`
sends), so no password is ever on a command line. `SecuredListeners` and `make_tls_material` (a self-signed
broker certificate for 127.0.0.1, made with the JDK's keytool) stand in `streamstack.local.kafka_security`.

With `SecuredListeners(authorization=AclAuthorization(...))` the broker enforces ACLs as a Strimzi cluster
with `authorization: simple` does: KRaft's StandardAuthorizer, `allow.everyone.if.no.acl.found=false`, and
no unauthenticated super user. The controller listener and an `INTERNAL` inter-broker listener then use
SASL/PLAIN (the broker logs in as `broker_user`, like Strimzi's broker certificate on its controller and
replication listeners), the admin client logs in on `INTERNAL` as `admin_user` (like the User Operator);
both are `super.users`. PLAINTEXT stays, as `ANONYMOUS` with no rights. Denials are logged by
`kafka.authorizer.logger` to `authorizer_log_path`.

Broker metrics: the broker loads Strimzi's Prometheus metrics reporter and serves at `metrics_url` (on
127.0.0.1) the metric names a Strimzi cluster with `metricsConfig: {type: strimziMetricsReporter}` exports
(by default those of Strimzi's default allowlist that our panels and alerts use; `metrics_allowlist`), so the
Kafka panels and alerts run on the same names locally and on a cluster (see `metrics_reporter_properties`).
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kafka import KafkaAdminClient
from kafka.admin import NewTopic, UserScramCredentialUpsertion
from kafka.errors import KafkaError, TopicAlreadyExistsError

from streamstack.errors import StreamstackError
from streamstack.local.kafka_security import AclAuthorization, SecuredListeners
from streamstack.local.ports import LOOPBACK, free_port
from streamstack.local.service import LocalService
from streamstack.runtimes import Runtimes

_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRefs = stdout
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


def _authorizer_log4j2(path: Path) -> str:
    """`kafka.authorizer.logger` (INFO: denials; allowed requests log at DEBUG) to a file of its own."""
    return f"""\
appender.authorizer.type = File
appender.authorizer.name = AUTHORIZER
appender.authorizer.fileName = {path}
appender.authorizer.layout.type = PatternLayout
appender.authorizer.layout.pattern = [%d] %p %m%n
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = INFO
logger.authorizer.additivity = false
logger.authorizer.appenderRef.authorizer.ref = AUTHORIZER
"""


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: `compact` sets cleanup.policy=compact (changelogs keep the latest value per key)."""

    name: str
    partitions: int = 1
    retention_ms: int | None = None
    compact: bool = False
    extra_config: Mapping[str, str] = field(default_factory=dict)

    def topic_config(self) -> dict[str, str]:
        config = dict(self.extra_config)
        if self.retention_ms is not None:
            config["retention.ms"] = str(self.retention_ms)
        if self.compact:
            config["cleanup.policy"] = "compact"
        return config


# Strimzi's Prometheus metrics reporter: io.strimzi:metrics-reporter 0.2.0 (the lock's
# "kafka-metrics-reporter" set). Strimzi 1.2.0 runs io.strimzi:server-metrics-reporter 0.4.0 (classes renamed
# to io.strimzi.kafka.metrics.prometheus.Server{Kafka,Yammer}MetricsReporter), which Maven Central does not
# serve here; both name a metric `<group>_<type>_<name>` (Yammer) or `<namespace>_<group>_<name>` (Kafka
# metrics), lowercased, with `_total` on counters. The Kafka reporter serves both over one HTTP listener.
# One difference: 0.2.0 takes a Yammer metric's labels from its scope, where Kafka wrote a topic `a.b` as
# `a_b` (strimzi/metrics-reporter#128 later reads them from the MBean name); pipeline topics have no dots.
METRICS_REPORTER_CLASS = "io.strimzi.kafka.metrics.KafkaPrometheusMetricsReporter"
YAMMER_METRICS_REPORTER_CLASS = "io.strimzi.kafka.metrics.YammerPrometheusMetricsReporter"
STRIMZI_METRICS_ALLOWLIST = (
    # Strimzi 1.2.0's default allowlist for a Kafka cluster's strimziMetricsReporter (KafkaCluster.java,
    # DEFAULT_METRICS_ALLOW_LIST), which our Kafka CR keeps: locally the same metrics exist as on a cluster.
    "kafka_cluster_partition.*",
    "kafka_controller_kafkacontroller.*",
    "kafka_controller_controllerstats_uncleanleaderelectionspersec",
    "kafka_log_log_size",
    "kafka_network_requestmetrics.*",
    "kafka_network_socketserver_networkprocessoravgidlepercent",
    "kafka_server_app_info.*",
    "kafka_server_brokertopicmetrics.*",
    "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
    "kafka_server_kafkaserver_brokerstate",
    "kafka_server_kafkaserver_clusterid",
    "kafka_server_kafkaserver_linux.*",
    "kafka_server_raft.*",
    "kafka_server_replicamanager.*",
    "kafka_server_request_queue_size",
    "kafka_server_socket_server.*",
)
METRICS_ALLOWLIST = (
    # What the local broker exports: the entries of Strimzi's default allowlist that our Kafka panels and
    # alerts use (tests/monitoring/test_dashboards.py checks both), without the ~6,000 request-metric series
    # that a 2 s scrape on a small machine would pay for.
    "kafka_cluster_partition.*",
    "kafka_controller_kafkacontroller.*",
    "kafka_server_brokertopicmetrics.*",
    "kafka_server_kafkaserver_brokerstate",
    "kafka_server_replicamanager.*",
)


def metrics_reporter_properties(port: int, allowlist: Sequence[str] = METRICS_ALLOWLIST) -> dict[str, str]:
    """Broker properties that load the metrics reporter and serve its metrics on 127.0.0.1:`port`."""
    return {
        "metric.reporters": METRICS_REPORTER_CLASS,
        "kafka.metrics.reporters": YAMMER_METRICS_REPORTER_CLASS,
        "prometheus.metrics.reporter.listener.enable": "true",
        "prometheus.metrics.reporter.listener": f"http://{LOOPBACK}:{port}",
        "prometheus.metrics.reporter.allowlist": ",".join(allowlist),
    }


def metrics_reporter_url(port: int) -> str:
    """Where a broker started with `metrics_reporter_properties(port)` serves its metrics."""
    return f"http://{LOOPBACK}:{port}/metrics"


_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _cluster_id() -> str:
    """A random KRaft cluster id that, like Kafka's own, never starts with '-' (read as an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


LOCAL_KAFKA_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1",)
"""The broker's (and its storage tool's) JVM options for the local stack and the tests: C1 alone, as the local
Kafka Connect runs. A broker ready in about half the CPU (README, "Local stack at its defaults"); at the local
stack's rates it never needs C2's code. The benchmarks pass none, so that their brokers run as a cluster's."""


class LocalKafka(LocalService):
    """Formats storage, starts the broker, waits until it answers, creates topics, stops it; restarts it on
    the same storage."""

    name = "kafka"
    title = "Kafka"
    port_flag = "--kafka-port"
    stop_timeout = 30.0

    def __init__(
        self,
        runtimes: Runtimes,
        workdir: Path,
        port: int = 0,
        heap: str = "768m",
        secured: SecuredListeners | None = None,
        *,
        metrics_allowlist: Sequence[str] = METRICS_ALLOWLIST,
        java_options: Sequence[str] = LOCAL_KAFKA_JAVA_OPTIONS,
    ) -> None:
        super().__init__(runtimes, workdir, port)
        self.java_options = tuple(java_options)
        self.controller_port = free_port()
        self.metrics_port = free_port()
        self.metrics_allowlist = tuple(metrics_allowlist)
        self.heap = heap
        self.secured = secured
        self.secured_ports = {protocol: free_port() for protocol in secured.protocols} if secured else {}
        self.internal_port = free_port() if secured and secured.authorization else None
        self.authorizer_log_path = workdir / "kafka-authorizer.log"

    def listening_ports(self) -> dict[str, int]:
        return {
            "client listener": self.port,
            "controller listener": self.controller_port,
            "metrics reporter": self.metrics_port,
            **{f"{protocol} listener": port for protocol, port in self.secured_ports.items()},
            **({"internal listener": self.internal_port} if self.internal_port is not None else {}),
        }

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def metrics_url(self) -> str:
        """The metrics reporter's endpoint (Strimzi's metric names), for Prometheus or a test to read."""
        return metrics_reporter_url(self.metrics_port)

    @property
    def metrics_target(self) -> str:
        """host:port of `metrics_url`, as a Prometheus static target."""
        return f"{LOOPBACK}:{self.metrics_port}"

    def address(self, security_protocol: str) -> str:
        """The bootstrap address of the listener for `security_protocol` (PLAINTEXT or a secured one)."""
        if security_protocol == "PLAINTEXT":
            return self.bootstrap_servers
        if security_protocol not in self.secured_ports:
            raise StreamstackError(f"this broker has no {security_protocol} listener")
        return f"{LOOPBACK}:{self.secured_ports[security_protocol]}"

    def _java(self, main_class: str, *args: str) -> list[str]:
        jars = (*self.runtimes.kafka_classpath, *self.runtimes.metrics_reporter_jars)
        classpath = os.pathsep.join(str(jar) for jar in jars)
        return [
            str(self.runtimes.java),
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            *self.java_options,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            classpath,
            main_class,
            *args,
        ]

    def _write_config(self) -> Path:
        data_dir = self.workdir / "data"
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"{LOOPBACK}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{LOOPBACK}:{self.port},CONTROLLER://{LOOPBACK}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "log.cleaner.backoff.ms": "1000",
            **metrics_reporter_properties(self.metrics_port, self.metrics_allowlist),
        }
        if self.secured is not None:
            properties.update(self._secured_properties(self.secured))
        config_path = self.workdir / "server.properties"
        config_path.touch(mode=0o600)  # it may hold the keystore's and the super users' passwords
        config_path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
        log4j = _LOG4J2
        if self.secured is not None and self.secured.authorization is not None:
            log4j += _authorizer_log4j2(self.authorizer_log_path)
        (self.workdir / "log4j2.properties").write_text(log4j)
        return config_path

    def _secured_properties(self, secured: SecuredListeners) -> dict[str, str]:
        listeners = [f"{protocol}://{LOOPBACK}:{port}" for protocol, port in self.secured_ports.items()]
        properties = {
            "listeners": ",".join([f"PLAINTEXT://{LOOPBACK}:{self.port}", *listeners])
            + f",CONTROLLER://{LOOPBACK}:{self.controller_port}",
            "advertised.listeners": ",".join([f"PLAINTEXT://{LOOPBACK}:{self.port}", *listeners]),
            "listener.security.protocol.map": ",".join(
                ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT", *(f"{p}:{p}" for p in self.secured_ports)]
            ),
        }
        if secured.scram_mechanisms:
            properties["sasl.enabled.mechanisms"] = ",".join(secured.scram_mechanisms)
            for protocol in self.secured_ports:
                if protocol.startswith("SASL_"):
                    for mechanism in secured.scram_mechanisms:
                        key = f"listener.name.{protocol.lower()}.{mechanism.lower()}.sasl.jaas.config"
                        properties[key] = _SCRAM_LOGIN
        if secured.keystore is not None:
            properties["ssl.keystore.type"] = "PKCS12"
            properties["ssl.keystore.location"] = str(secured.keystore.path)
            properties["ssl.keystore.password"] = secured.keystore.password
        if secured.authorization is not None:
            properties.update(self._authorization_properties(properties, secured.authorization))
        return properties

    def _authorization_properties(self, secured: dict[str, str], auth: AclAuthorization) -> dict[str, str]:
        """The INTERNAL listener, SASL/PLAIN on it and on CONTROLLER, the authorizer and its super users."""
        internal = f"INTERNAL://{LOOPBACK}:{self.internal_port}"
        broker_login = f'{_PLAIN_LOGIN} username="{auth.broker_user}" password="{auth.broker_password}"'
        broker_entry = f'user_{auth.broker_user}="{auth.broker_password}"'
        admin_entry = f'user_{auth.admin_user}="{auth.admin_password}"'
        controller = f",CONTROLLER://{LOOPBACK}:{self.controller_port}"
        return {
            "listeners": secured["listeners"].removesuffix(controller) + f",{internal}{controller}",
            "advertised.listeners": secured["advertised.listeners"] + f",{internal}",
            "listener.security.protocol.map": secured["listener.security.protocol.map"].replace(
                "CONTROLLER:PLAINTEXT", "CONTROLLER:SASL_PLAINTEXT"
            )
            + ",INTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": f"{broker_login} {broker_entry} {admin_entry};",
            "listener.name.controller.plain.sasl.jaas.config": f"{broker_login} {broker_entry};",
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "allow.everyone.if.no.acl.found": "false",
            "super.users": ";".join(auth.super_users),
        }

    def start(self, timeout: float = 90.0) -> LocalKafka:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config_path = self._write_config()
        cluster_id = _cluster_id()
        formatted = subprocess.run(
            self._java(
                "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config_path), "--standalone"
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if formatted.returncode != 0:
            raise StreamstackError(f"formatting Kafka storage failed: {formatted.stderr.strip()[-500:]}")
        self._launch(self._java("kafka.Kafka", str(config_path)))
        self._wait_until_ready(timeout)
        return self

    def restart(self, timeout: float = 90.0) -> LocalKafka:
        """Start the stopped broker again on its ports and its storage, as a rolling restart does: the same
        cluster id, topics, records and committed offsets; clients reconnect to the same address."""
        self._relaunch()
        self._wait_until_ready(timeout)
        return self

    def _wait_until_ready(self, timeout: float) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._process.is_running():
                raise StreamstackError(
                    f"Kafka exited with code {self._process.exit_code()} while starting; see {self.log_path}"
                )
            try:
                # Capped reconnect backoff: ready is seen within a poll of the broker listening (by
                # default the backoff doubles to seconds while the JVM starts, and readiness is seen late).
                admin = KafkaAdminClient(
                    request_timeout_ms=3000,
                    bootstrap_timeout_ms=3000,
                    reconnect_backoff_max_ms=300,
                    **self._admin_options(),
                )
            except KafkaError:
                time.sleep(0.3)
                continue
            try:
                admin.describe_cluster()
                return
            except KafkaError:
                time.sleep(0.3)
            finally:
                admin.close()
        self.stop()
        raise StreamstackError(f"Kafka did not answer on {self.bootstrap_servers} within {timeout:.0f} s")

    def _admin_options(self) -> dict[str, str]:
        """PLAINTEXT; with ACLs enforced, the INTERNAL listener as the admin super user."""
        authorization = self.secured.authorization if self.secured is not None else None
        if authorization is None:
            return {"bootstrap_servers": self.bootstrap_servers, "client_id": "streamstack"}
        return {
            "bootstrap_servers": f"{LOOPBACK}:{self.internal_port}",
            "client_id": "streamstack",
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": authorization.admin_user,
            "sasl_plain_password": authorization.admin_password,
        }

    def admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(**self._admin_options())

    def add_scram_user(self, username: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
        """Create or update a SCRAM credential through the admin client (PLAINTEXT, or INTERNAL as the
        admin super user when ACLs are enforced); no password on any argv."""
        if self.secured is None or mechanism not in self.secured.scram_mechanisms:
            raise StreamstackError(f"{mechanism} is not enabled on this broker (SecuredListeners)")
        admin = self.admin()
        try:
            errors = admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(username, mechanism, password)]
            )
        finally:
            admin.close()
        if errors.get(username):
            raise StreamstackError(
                f"creating the {mechanism} credential of {username} failed: {errors[username]}"
            )

    def create_topics(self, topics: Iterable[TopicSpec], timeout: float = 30.0) -> None:
        """Create the topics (existing ones stay as they are); wait until every partition has a leader."""
        wanted = list(topics)
        admin = self.admin()
        try:
            for topic in wanted:
                with contextlib.suppress(TopicAlreadyExistsError):
                    admin.create_topics(
                        [NewTopic(topic.name, topic.partitions, 1, topic_configs=topic.topic_config())]
                    )
            deadline = time.monotonic() + timeout
            while not self._all_partitions_led(admin, wanted):
                if time.monotonic() > deadline:
                    names = ", ".join(topic.name for topic in wanted)
                    raise StreamstackError(f"topics {names} had no leader after {timeout:.0f} s")
                time.sleep(0.2)
        finally:
            admin.close()

    @staticmethod
    def _all_partitions_led(admin: KafkaAdminClient, topics: list[TopicSpec]) -> bool:
        described = {
            topic["name"]: topic for topic in admin.describe_topics([topic.name for topic in topics])
        }
        return all(
            len(described.get(topic.name, {}).get("partitions", [])) >= topic.partitions
            and all(partition["leader_id"] >= 0 for partition in described[topic.name]["partitions"])
            for topic in topics
        )

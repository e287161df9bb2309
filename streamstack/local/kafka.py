"""A single-node KRaft Kafka (broker and controller in one JVM) on 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from streamstack.errors import StreamstackError
from streamstack.local.ports import LOOPBACK, claim_port, free_port
from streamstack.local.process import ManagedProcess
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


def _cluster_id() -> str:
    """A random KRaft cluster id that, like Kafka's own, never starts with '-' (read as an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class LocalKafka:
    """Formats storage, starts the broker, waits until it answers, creates topics, stops it."""

    def __init__(self, runtimes: Runtimes, workdir: Path, port: int = 0, heap: str = "768m") -> None:
        self.runtimes = runtimes
        self.workdir = workdir
        self.port = claim_port(port, "Kafka", "--kafka-port")
        self.controller_port = free_port()
        self.heap = heap
        self.log_path = workdir / "kafka.log"
        self._process: ManagedProcess | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("Kafka has not been started")
        return self._process.pid

    def _java(self, main_class: str, *args: str) -> list[str]:
        classpath = os.pathsep.join(str(jar) for jar in self.runtimes.kafka_classpath)
        return [
            str(self.runtimes.java),
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
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
        }
        config_path = self.workdir / "server.properties"
        config_path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        return config_path

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
        self._process = ManagedProcess(
            "kafka", self._java("kafka.Kafka", str(config_path)), self.log_path
        ).start()
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
                admin = KafkaAdminClient(
                    bootstrap_servers=self.bootstrap_servers, request_timeout_ms=3000, client_id="streamstack"
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

    def admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, client_id="streamstack")

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

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop(timeout=30)

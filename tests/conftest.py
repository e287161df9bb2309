"""Session fixtures that own real processes: a KRaft Kafka broker and a local[2] SparkSession."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from pyspark import SparkContext
from pyspark.sql import SparkSession

from jobs.common.session import CHECKPOINT_FS_CONF
from jobs.jvm.build import build_jar
from streamstack import runtimes as runtime_cache
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.runtimes import Runtimes
from tests.kafka_helpers import wait_for


@pytest.fixture(scope="session")
def runtimes() -> Runtimes:
    """The pinned runtimes, fetched if missing; a missing component fails the run, it never skips."""
    return runtime_cache.ensure(log=lambda line: print(line, file=sys.stderr))


@pytest.fixture(scope="session")
def kafka(runtimes: Runtimes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    broker = LocalKafka(runtimes, tmp_path_factory.mktemp("kafka"), port=0).start()
    try:
        _load_group_coordinator(broker)
        yield broker
    finally:
        broker.stop()


def _load_group_coordinator(broker: LocalKafka) -> None:
    """Commit once and wait until the broker lists groups: the first commit creates `__consumer_offsets`,
    whose partitions then load for a while (group requests answer COORDINATOR_LOAD_IN_PROGRESS). The broker
    is shared by every test of a worker, so whichever test comes first must not be the one that meets this."""
    topic = group = "streamstack-tests-warm-up"
    broker.create_topics([TopicSpec(topic, partitions=1)])
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)})

        def lists_groups() -> bool:
            return group in {listed["group_id"] for listed in admin.list_groups()}

        wait_for(lists_groups, timeout=120, what="the broker's group coordinator to load")
    finally:
        consumer.close(autocommit=False)
        admin.close()


@pytest.fixture(scope="session")
def spark(runtimes: Runtimes) -> Iterator[SparkSession]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["JAVA_HOME"] = str(runtimes.java.parent.parent)
    jvm_jar = str(build_jar())
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("streamstack-tests")
        # The Kafka connector, and the jobs' JVM code (built here when `make setup` has not), which also
        # holds the checkpoint filesystem every job's session uses: the tests' checkpoints go through it too.
        .config("spark.jars", ",".join(str(jar) for jar in (*runtimes.spark_kafka_jars, jvm_jar)))
        .config("spark.driver.extraClassPath", jvm_jar)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    for key, value in CHECKPOINT_FS_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        yield session
    finally:
        gateway = SparkContext._gateway
        session.stop()
        # The driver JVM would linger until this process exits; stop and reap it here.
        jvm_process = getattr(gateway, "proc", None)
        if jvm_process is not None:
            jvm_process.terminate()
            jvm_process.wait(timeout=30)


@pytest.fixture
def topic_name() -> str:
    """A fresh topic name per test, so tests sharing the session broker never see each other's records."""
    return f"test-{uuid.uuid4().hex[:12]}"


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent

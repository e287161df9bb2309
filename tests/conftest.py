"""Session fixtures that own real processes: a KRaft Kafka broker and a local[2] SparkSession."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark import SparkContext
from pyspark.sql import SparkSession

from streamstack import runtimes as runtime_cache
from streamstack.local.kafka import LocalKafka
from streamstack.runtimes import Runtimes


@pytest.fixture(scope="session")
def runtimes() -> Runtimes:
    """The pinned runtimes, fetched if missing; a missing component fails the run, it never skips."""
    return runtime_cache.ensure(log=lambda line: print(line, file=sys.stderr))


@pytest.fixture(scope="session")
def kafka(runtimes: Runtimes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    broker = LocalKafka(runtimes, tmp_path_factory.mktemp("kafka"), port=0).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def spark(runtimes: Runtimes) -> Iterator[SparkSession]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["JAVA_HOME"] = str(runtimes.java.parent.parent)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("streamstack-tests")
        .config("spark.jars", ",".join(str(jar) for jar in runtimes.spark_kafka_jars))
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
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

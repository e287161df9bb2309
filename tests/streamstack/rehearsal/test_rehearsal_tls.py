"""The prod stack's Kafka clients, as rendered, on a real SASL_SSL broker.

`render_stack("prod")` gives every job and the lag exporter SASL_SSL on the TLS listener and the cluster CA
from a Secret mounted into their pods. Here the rehearsal's broker plays the cluster: SCRAM over TLS with a
certificate of its own, and the CA a kubelet would mount (the copy of `<cluster>-cluster-ca-cert`) is that
certificate, put at the rendered mount path's place. Everything else comes from the render: the protocol,
the SASL mechanism and the CA file variables of a job's driver and executors and of the exporter; only the
credentials (from the users' Secrets), the bootstrap address and the mount's directory are this machine's.
A job's Kafka sink and source (Spark's Java clients with the PEM truststore) and the exporter (kafka-python)
then work, and the same clients without the CA fail the TLS handshake.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from contracts.kafka_security import KafkaSecurity
from jobs.common.config import StreamingJobConfig
from jobs.common.kafka_io import kafka_options, read_kafka_stream, write_kafka_batch
from monitoring.lag_exporter.collector import ExporterHealth
from monitoring.lag_exporter.config import ExporterConfig
from monitoring.lag_exporter.config import parse_args as exporter_args
from monitoring.lag_exporter.kafka_reader import KafkaReader
from monitoring.lag_exporter.loop import Refresher
from streamstack.rehearsal.kafka import RehearsalKafka
from streamstack.rehearsal.rendered_kafka import kafka_user_of, rendered_kafka_users
from streamstack.render import RenderedStack, render_stack
from streamstack.runtimes import Runtimes
from tests.jobs.streaming_helpers import streaming_config

pytestmark = pytest.mark.integration

JOB = "user-view"  # reads and writes its own output topic, so one user exercises sink and source
JOB_CA_FILE = "STREAMSTACK_KAFKA_SSL_CA_FILE"


@pytest.fixture(scope="module")
def prod() -> RenderedStack:
    return render_stack("prod")


@pytest.fixture(scope="module")
def broker(
    runtimes: Runtimes, prod: RenderedStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RehearsalKafka]:
    """The broker the render asks for: SASL_SSL because the rendered clients use it."""
    with RehearsalKafka.from_rendered(
        runtimes, tmp_path_factory.mktemp("tls-kafka"), prod.manifests
    ) as kafka:
        yield kafka


def kubelet_mount(broker: RehearsalKafka, directory: Path) -> Path:
    """The CA Secret's copy as a kubelet mounts it: a directory with `ca.crt`, here the broker's CA."""
    assert broker.ca_file is not None, "the broker runs without TLS: the render's clients do not use SASL_SSL"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(broker.ca_file.read_bytes())
    return directory


def remounted(environment: Mapping[str, str], mounts: Mapping[str, Path]) -> dict[str, str]:
    """The environment with each path under a rendered mount path moved to where that mount is here."""
    result = dict(environment)
    for name, value in environment.items():
        for mount_path, local in mounts.items():
            if value.startswith(mount_path.rstrip("/") + "/"):
                result[name] = str(local / value[len(mount_path.rstrip("/")) + 1 :])
    return result


def job_security(prod: RenderedStack, broker: RehearsalKafka, role: str, workdir: Path) -> KafkaSecurity:
    """What the job's driver or executor parses (jobs/common/config.py) from its rendered Spark conf, with its
    rendered Secret mounts at a local directory and its password from its KafkaUser."""
    (application,) = prod.find("SparkApplication", JOB)
    conf: dict[str, str] = application["spec"]["sparkConf"]
    env_prefix = "spark.kubernetes.driverEnv." if role == "driver" else "spark.executorEnv."
    environment = {k.removeprefix(env_prefix): v for k, v in conf.items() if k.startswith(env_prefix)}
    mount_prefix = f"spark.kubernetes.{role}.secrets."
    mounts = {
        path: kubelet_mount(broker, workdir / role / secret)
        for key, path in conf.items()
        if key.startswith(mount_prefix)
        for secret in [key.removeprefix(mount_prefix)]
    }
    jaas = broker.client_environment(JOB)["STREAMSTACK_KAFKA_SASL_JAAS_CONFIG"]  # the secretKeyRef's value
    assert conf[f"spark.kubernetes.{role}.secretKeyRef.STREAMSTACK_KAFKA_SASL_JAAS_CONFIG"].startswith(JOB)
    return KafkaSecurity.from_environment(
        {**remounted(environment, mounts), "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG": jaas}
    )


def job_config(prod: RenderedStack, broker: RehearsalKafka, tmp_path: Path) -> StreamingJobConfig:
    (application,) = prod.find("SparkApplication", JOB)
    arguments = application["spec"]["arguments"]
    assert arguments[:2] == ["--bootstrap-servers", "streamstack-kafka-bootstrap.kafka.svc:9093"]
    return replace(
        streaming_config(JOB, broker.bootstrap_servers, tmp_path, "unused"),
        kafka_security=job_security(prod, broker, "driver", tmp_path / "mounts"),
    )


def exporter_config(prod: RenderedStack, broker: RehearsalKafka, workdir: Path) -> ExporterConfig:
    """The exporter's settings as its rendered Deployment gives them, the CA volume mounted here."""
    (deployment,) = prod.find("Deployment", "lag-exporter")
    user = kafka_user_of(deployment, rendered_kafka_users(prod.manifests))
    assert user is not None
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    secret_volumes = {volume["name"] for volume in pod["volumes"] if "secret" in volume}
    mounts = {
        mount["mountPath"]: kubelet_mount(broker, workdir / mount["name"])
        for mount in container["volumeMounts"]
        if mount["name"] in secret_volumes
    }
    arguments = [
        arg for arg in container["args"] if "=/checkpoints/" not in arg and arg != "--checkpoint-dir"
    ]
    jaas = broker.client_environment(user.name)["STREAMSTACK_KAFKA_SASL_JAAS_CONFIG"]  # the secretKeyRef's
    environment = {
        **remounted({v["name"]: v["value"] for v in container["env"] if "value" in v}, mounts),
        "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG": jaas,
        "STREAMSTACK_LAG_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "STREAMSTACK_LAG_LISTEN": "127.0.0.1:0",
    }
    return exporter_args(arguments, env=environment)


def collect(config: ExporterConfig) -> tuple[bool, set[str]]:
    reader = KafkaReader(config)
    refresher = Refresher(config, reader, ExporterHealth(CollectorRegistry()))
    try:
        collected = refresher.refresh()
        snapshot = refresher.latest()
    finally:
        reader.close()
    return collected, {group.group for group in snapshot.groups} if snapshot is not None else set()


def test_the_prod_render_asks_for_sasl_ssl_and_the_ca_on_driver_and_executors(
    prod: RenderedStack, broker: RehearsalKafka, tmp_path: Path
) -> None:
    assert broker.tls and broker.security_protocol == "SASL_SSL"
    for role in ("driver", "executor"):
        security = job_security(prod, broker, role, tmp_path)
        assert security.ssl_ca_file is not None and Path(security.ssl_ca_file).read_bytes() == (
            broker.ca_file.read_bytes() if broker.ca_file else b""
        )
        options = security.spark_options()
        assert options["kafka.security.protocol"] == "SASL_SSL"
        assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
        assert options["kafka.ssl.truststore.type"] == "PEM"
        assert options["kafka.ssl.truststore.location"] == security.ssl_ca_file


@pytest.mark.spark
def test_a_jobs_kafka_sink_and_source_work_over_sasl_ssl_with_the_mounted_ca(
    prod: RenderedStack, broker: RehearsalKafka, spark: SparkSession, tmp_path: Path
) -> None:
    config = job_config(prod, broker, tmp_path)
    rows = spark.createDataFrame([("tls-key", '{"user_id": "tls"}')], "key string, value string")
    write_kafka_batch(rows, config, JOB)  # Spark's Kafka sink (a Java producer with the PEM truststore)
    query = (
        read_kafka_stream(spark, replace(config, starting_offsets="earliest"), [JOB])  # Spark's Kafka source
        .selectExpr("CAST(key AS STRING) AS key")
        .writeStream.format("memory")
        .queryName("tls_source")
        .option("checkpointLocation", str(tmp_path / "source-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
        assert query.exception() is None
        keys = [row.key for row in spark.sql("SELECT key FROM tls_source").collect()]
    finally:
        query.stop()
    assert "tls-key" in keys
    assert broker.acl_denials().get(f"User:{JOB}", []) == []


@pytest.mark.spark
def test_a_jobs_kafka_sink_without_the_ca_fails_the_tls_handshake(
    prod: RenderedStack, broker: RehearsalKafka, spark: SparkSession, tmp_path: Path
) -> None:
    config = job_config(prod, broker, tmp_path)
    untrusting = replace(config, kafka_security=replace(config.kafka_security, ssl_ca_file=None))
    assert "kafka.ssl.truststore.location" not in kafka_options(untrusting)
    rows = spark.createDataFrame([("k", "{}")], "key string, value string")
    with pytest.raises(Exception, match=r"(?s)SSL handshake failed|PKIX path building failed"):
        write_kafka_batch(rows, untrusting, JOB)


def test_the_exporter_collects_over_sasl_ssl_with_the_mounted_ca_and_fails_without(
    prod: RenderedStack, broker: RehearsalKafka, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = exporter_config(prod, broker, tmp_path)
    assert config.security.security_protocol == "SASL_SSL"
    assert config.security.ssl_ca_file is not None and Path(config.security.ssl_ca_file).is_file()
    collected, _ = collect(config)
    assert collected
    assert broker.acl_denials().get("User:lag-exporter", []) == []

    untrusting = replace(config, security=replace(config.security, ssl_ca_file=None), kafka_timeout=3.0)
    with caplog.at_level(logging.WARNING):
        collected, _ = collect(untrusting)
    assert not collected
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text, caplog.text

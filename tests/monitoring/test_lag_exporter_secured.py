"""The lag exporter against a real secured broker: SASL/SCRAM-SHA-512 over plaintext and over TLS, and TLS
alone, with a certificate made by the JDK's keytool. Credentials reach the exporter only through its
environment; a wrong password leaves it serving `up 0` without leaking threads, and the password never shows
up in its output, its metrics or its command line."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.consumer import OffsetSpec
from kafka.structs import OffsetAndMetadata

from contracts.kafka_security import jaas_config
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.kafka_security import SecuredListeners, TlsMaterial, make_tls_material
from streamstack.runtimes import Runtimes
from tests.kafka_helpers import scrape, wait_for
from tests.monitoring.exporter_process import running_exporter

pytestmark = pytest.mark.integration

USER = "lag-exporter"
TOPIC = "secured-orders"
COUNTS = (9, 4, 0)  # records per partition
GROUPS = {"secured-billing": {0: 2, 1: 4, 2: 0}, "secured-audit": {0: 9, 1: 1}}


@dataclass(frozen=True)
class SecuredBroker:
    kafka: LocalKafka
    password: str
    tls: TlsMaterial
    timestamps_ms: dict[int, list[int]]  # partition -> timestamp of the record at each offset


@pytest.fixture(scope="module")
def secured(runtimes: Runtimes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    """A broker of its own with SASL_PLAINTEXT, SSL and SASL_SSL listeners beside PLAINTEXT, one SCRAM user,
    and a topic with committed groups (set up through PLAINTEXT)."""
    workdir = tmp_path_factory.mktemp("secured-kafka")
    tls = make_tls_material(runtimes.java, workdir / "tls", secrets.token_urlsafe(12))
    kafka = LocalKafka(
        runtimes, workdir / "kafka", secured=SecuredListeners(("SCRAM-SHA-512",), tls.keystore)
    )
    kafka.start()
    try:
        password = secrets.token_urlsafe(18)  # unique, so finding it anywhere means it leaked
        kafka.add_scram_user(USER, password)
        kafka.create_topics([TopicSpec(TOPIC, partitions=len(COUNTS))])
        start_ms = int(time.time() * 1000) - 300_000  # records 5 minutes old, one second apart
        timestamps = {p: [start_ms + offset * 1000 for offset in range(n)] for p, n in enumerate(COUNTS)}
        producer = KafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all")
        try:
            for partition, stamps in timestamps.items():
                for stamp in stamps:
                    producer.send(TOPIC, value=b"order", partition=partition, timestamp_ms=stamp)
            producer.flush(timeout=30)
        finally:
            producer.close(timeout=10)
        for group, offsets in GROUPS.items():
            consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers, group_id=group)
            try:
                consumer.commit(
                    {TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
                )
            finally:
                consumer.close(autocommit=False)
        yield SecuredBroker(kafka, password, tls, timestamps)
    finally:
        kafka.stop()


def admin_ground_truth(kafka: LocalKafka) -> dict[tuple[str, int], tuple[int, int]]:
    """{(group, partition): (committed offset, lag in records)} from the admin API."""
    admin = kafka.admin()
    try:
        committed = admin.list_group_offsets(dict.fromkeys(GROUPS))
        tps = [TopicPartition(TOPIC, p) for p in range(len(COUNTS))]
        latest = admin.list_partition_offsets(dict.fromkeys(tps, OffsetSpec.LATEST))
    finally:
        admin.close()
    return {
        (group, tp.partition): (meta.offset, latest[tp].offset - meta.offset)
        for group, offsets in committed.items()
        for tp, meta in offsets.items()
    }


def exporter_environment(secured: SecuredBroker, protocol: str, password: str) -> dict[str, str]:
    """The login every client of ours reads (contracts.kafka_security), as the chart sets it."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("STREAMSTACK_")}
    env["STREAMSTACK_KAFKA_SECURITY_PROTOCOL"] = protocol
    if protocol.startswith("SASL_"):
        env["STREAMSTACK_KAFKA_SASL_MECHANISM"] = "SCRAM-SHA-512"
        env["STREAMSTACK_KAFKA_SASL_JAAS_CONFIG"] = jaas_config(USER, password)
    if protocol.endswith("SSL"):
        env["STREAMSTACK_KAFKA_SSL_CA_FILE"] = str(secured.tls.ca_certificate)
    return env


def exporter_flags(secured: SecuredBroker, protocol: str) -> list[str]:
    return [
        *("--bootstrap-servers", secured.kafka.address(protocol)),
        *("--refresh-interval", "0.5", "--window", "2", "--kafka-timeout", "2"),
    ]


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL", "SSL"])
def test_lag_through_a_secured_listener_equals_the_admin_api(
    secured: SecuredBroker, protocol: str, tmp_path: Path
) -> None:
    truth = admin_ground_truth(secured.kafka)
    assert truth[("secured-billing", 0)] == (2, 7) and len(truth) == 5

    def series(name: str, group: str, partition: int) -> str:
        labels = f'group="{group}",partition="{partition}",source="group",topic="{TOPIC}"'
        return f"streamstack_lag_{name}{{{labels}}}"

    flags = exporter_flags(secured, protocol)
    started = time.time()
    with running_exporter(
        flags, tmp_path / "exporter.log", env=exporter_environment(secured, protocol, secured.password)
    ) as run:
        wait_for(
            lambda: all(series("records", group, p) in scrape(run.url) for group, p in truth),
            timeout=30,
            what=f"the lag of every group over {protocol} (log {run.log_path})",
        )
        samples = scrape(run.url)
        scraped = time.time()
        cmdline = run.cmdline()

    lag = {key: samples[series("records", *key)] for key in truth}
    assert lag == {key: records for key, (_, records) in truth.items()}
    for (group, partition), (committed, records) in truth.items():
        seconds = samples[series("seconds", group, partition)]
        if records == 0:
            assert seconds == 0, (group, partition)
        else:  # the age of the record at the committed offset, measured between the exporter's start and now
            appended = secured.timestamps_ms[partition][committed] / 1000
            assert started - appended - 1 <= seconds <= scraped - appended + 1, (group, partition, seconds)
    assert samples["streamstack_lag_exporter_up"] == 1
    assert samples['streamstack_lag_exporter_errors_total{kind="kafka"}'] == 0
    assert secured.password not in run.output() and secured.password not in cmdline
    assert secured.kafka.address(protocol) in cmdline  # it is the exporter's command line we looked at


def test_a_wrong_password_serves_up_0_keeps_running_and_never_shows_the_password(
    secured: SecuredBroker, tmp_path: Path
) -> None:
    wrong = secrets.token_urlsafe(18)
    flags = [*exporter_flags(secured, "SASL_PLAINTEXT"), "--kafka-timeout", "1", "--log-level", "DEBUG"]
    environment = exporter_environment(secured, "SASL_PLAINTEXT", wrong)
    with running_exporter(flags, tmp_path / "exporter.log", env=environment) as run:

        def failed_collections() -> float:
            return scrape(run.url)['streamstack_lag_exporter_errors_total{kind="kafka"}']

        wait_for(lambda: failed_collections() >= 2, timeout=30, what="two failed collections")
        threads_after_two = run.thread_count()
        wait_for(lambda: failed_collections() >= 5, timeout=30, what="five failed collections")
        threads_after_five = run.thread_count()
        samples = scrape(run.url)
        metrics_text = "\n".join(samples)
        cmdline = run.cmdline()
        assert run.process.poll() is None  # still running, still serving

    assert samples["streamstack_lag_exporter_up"] == 0
    assert "streamstack_lag_records" not in samples
    # Each failed bootstrap used to leave kafka-python's IO thread behind (one per collection).
    assert threads_after_five <= threads_after_two + 1, (threads_after_two, threads_after_five)
    # At DEBUG kafka-python logs its admin client's whole configuration: the exporter redacts the password.
    assert "'sasl_plain_password': '<redacted>'" in run.output()
    for place, text in (("output", run.output()), ("cmdline", cmdline), ("metrics", metrics_text)):
        assert wrong not in text, place
        assert secured.password not in text, place
    assert run.process.returncode == 0  # stopped cleanly on SIGTERM

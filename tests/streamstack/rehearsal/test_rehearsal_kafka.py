"""Kafka secured as the dev stack renders it: every KafkaTopic, every KafkaUser with exactly its ACLs, on a
real broker that enforces them (StandardAuthorizer, allow.everyone.if.no.acl.found=false).

One broker for the module. What each job may touch comes from the rendered SparkApplication arguments and
the pipeline catalogue's reads/writes; the clients log in with the environment a cluster would give them
and parse it with the jobs' own KafkaSecurity. A denial is a real error from the broker and a line in its
authorizer log.
"""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    OffsetSpec,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import (
    GroupAuthorizationFailedError,
    KafkaError,
    KafkaTimeoutError,
    TopicAuthorizationFailedError,
)
from kafka.structs import OffsetAndMetadata
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from contracts.kafka_security import KafkaSecurity
from contracts.pipeline import load_pipeline
from jobs.common.kafka_io import write_kafka_batch
from monitoring.lag_exporter.collector import ExporterHealth
from monitoring.lag_exporter.config import parse_args as exporter_args
from monitoring.lag_exporter.kafka_reader import KafkaReader
from monitoring.lag_exporter.loop import Refresher
from streamstack.errors import StreamstackError
from streamstack.paths import REPO_ROOT
from streamstack.rehearsal.kafka import RehearsalKafka
from streamstack.rehearsal.rendered_kafka import (
    kafka_user_of,
    rendered_kafka_topics,
    rendered_kafka_users,
    rendered_security_protocol,
    users_by_secret,
    workload_kafka_users,
)
from streamstack.render import RenderedStack, render_stack
from streamstack.runtimes import Runtimes
from tests.jobs.streaming_helpers import streaming_config

pytestmark = pytest.mark.integration

PIPELINE = load_pipeline()


@pytest.fixture(scope="module")
def rendered() -> RenderedStack:
    return render_stack("dev")


@pytest.fixture(scope="module")
def rehearsal(
    runtimes: Runtimes, rendered: RenderedStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RehearsalKafka]:
    with RehearsalKafka.from_rendered(
        runtimes, tmp_path_factory.mktemp("rehearsal-kafka"), rendered.manifests
    ) as kafka:
        yield kafka


def spark_applications(rendered: RenderedStack) -> list[dict[str, Any]]:
    return rendered.find("SparkApplication")


def flags(arguments: Sequence[str]) -> dict[str, str]:
    """`--flag value` pairs of a rendered argv (every flag of our jobs takes a value)."""
    return {
        arguments[i]: arguments[i + 1] for i in range(0, len(arguments) - 1) if arguments[i].startswith("--")
    }


def job_topics(application: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """(read, written) topics of a rendered SparkApplication: its catalogue job's read and write flags,
    looked up in the arguments the application passes (the dead-letter topic is written by every job)."""
    job = PIPELINE.job(application["metadata"]["name"])
    given = flags(application["spec"]["arguments"])
    reads = {given[flag] for flag in job.reads}
    writes = {given[flag] for flag in job.writes} | {given["--dead-letter-topic"]}
    return reads, writes


def login(kafka: RehearsalKafka, user: str) -> dict[str, Any]:
    """kafka-python options from the environment a job gets, parsed by the jobs' own KafkaSecurity."""
    security = KafkaSecurity.from_environment(kafka.client_environment(user))
    return {"bootstrap_servers": kafka.bootstrap_servers, **security.client_options()}


def produce(options: Mapping[str, Any], topic: str, *, idempotent: bool = True) -> None:
    """One record through an idempotent acks=all producer (what Spark's Kafka sink and our producers use:
    both clients are idempotent by default)."""
    producer = KafkaProducer(acks="all", enable_idempotence=idempotent, max_block_ms=10_000, **options)
    try:
        producer.send(topic, key=b"rehearsal", value=b"{}").get(timeout=15)
    finally:
        producer.close(timeout=5)


def read_some(options: Mapping[str, Any], topic: str, partitions: int, group: str | None) -> int:
    """Records fetched from the start of every partition, as Spark's executors fetch (assigned partitions,
    a group id that never joins or commits; kafka-python still asks the group's coordinator for committed
    offsets, which Spark's Java consumer does not, so it needs Describe on the group too)."""
    consumer = KafkaConsumer(group_id=group, enable_auto_commit=False, **options)
    try:
        consumer.assign([TopicPartition(topic, partition) for partition in range(partitions)])
        consumer.seek_to_beginning()
        deadline, fetched = time.monotonic() + 10, 0
        while not fetched and time.monotonic() < deadline:
            fetched = sum(len(records) for records in consumer.poll(timeout_ms=500).values())
        return fetched
    finally:
        consumer.close(autocommit=False)


def commit(options: Mapping[str, Any], group: str, topic: str) -> None:
    """What a job's shadow-group committer does: commit offsets to a group no consumer joins."""
    consumer = KafkaConsumer(group_id=group, enable_auto_commit=False, **options)
    try:
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)})
    finally:
        consumer.close(autocommit=False)


def end_offsets(kafka: RehearsalKafka, topic: str) -> dict[int, int]:
    """Latest offset per partition, read by the rehearsal's admin."""
    admin = kafka.admin()
    try:
        (described,) = admin.describe_topics([topic])
        specs = {TopicPartition(topic, p): OffsetSpec.LATEST for p in range(len(described["partitions"]))}
        return {tp.partition: int(value.offset) for tp, value in admin.list_partition_offsets(specs).items()}
    finally:
        admin.close()


def denied(kafka: RehearsalKafka, user: str) -> list[str]:
    return kafka.acl_denials().get(f"User:{user}", [])


# --- reading the render ------------------------------------------------------------------------------


def test_users_topics_and_who_logs_in_as_whom_come_from_the_render(rendered: RenderedStack) -> None:
    users = rendered_kafka_users(rendered.manifests)
    raw = {manifest["metadata"]["name"]: manifest for manifest in rendered.find("KafkaUser")}
    assert [user.name for user in users] == list(raw)
    for user in users:
        acls = raw[user.name]["spec"]["authorization"]["acls"]
        assert len(user.bindings()) == sum(len(acl["operations"]) for acl in acls)
    assert {user.name for user in users} == {
        *(job.name for job in PIPELINE.jobs),
        "lag-exporter",
        "load-generator",
    }

    topics = {topic.name: topic for topic in rendered_kafka_topics(rendered.manifests)}
    assert set(topics) == {topic.name for topic in PIPELINE.topics}
    assert topics["users"].config["cleanup.policy"] == "compact"
    assert topics["page-views"].partitions == PIPELINE.topic("page-views").partitions

    workloads = workload_kafka_users(rendered.manifests)
    assert {key: user.name for key, user in workloads.items()} == {
        **{f"SparkApplication/{job.name}": job.name for job in PIPELINE.jobs},
        "Deployment/lag-exporter": "lag-exporter",
    }
    assert users_by_secret(users)[rendered.outputs["loadGeneratorSecret"]].name == "load-generator"
    assert rendered_security_protocol(rendered.manifests) == "SASL_PLAINTEXT"


def test_every_job_user_is_allowed_exactly_its_catalogue_topics(rendered: RenderedStack) -> None:
    users = rendered_kafka_users(rendered.manifests)
    topics = [topic.name for topic in rendered_kafka_topics(rendered.manifests)]
    for application in spark_applications(rendered):
        user = kafka_user_of(application, users)
        assert user is not None
        reads, writes = job_topics(application)
        assert {topic for topic in topics if user.allows("Read", "topic", topic)} == reads, user.name
        assert {topic for topic in topics if user.allows("Write", "topic", topic)} == writes, user.name
        shadow = flags(application["spec"]["arguments"])["--shadow-group-prefix"] + user.name
        assert user.allows("Read", "group", shadow) and user.allows("Read", "group", f"{shadow}.dead-letters")
        assert not user.allows("Read", "group", "streamstack-someone-else")


def test_a_strimzi_acl_is_read_with_its_defaults_and_unknown_shapes_fail() -> None:
    def user(acls: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": "kafka.strimzi.io/v1",
            "kind": "KafkaUser",
            "metadata": {"name": "someone"},
            "spec": {
                "authentication": {"type": "scram-sha-512"},
                "authorization": {"type": "simple", "acls": acls},
            },
        }

    (parsed,) = rendered_kafka_users(
        [
            user(
                [
                    {"resource": {"type": "topic", "name": "t"}, "operations": ["Read"]},
                    {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"], "type": "deny"},
                ]
            )
        ]
    )
    topic, cluster = parsed.bindings()
    assert (topic.host, topic.permission_type, topic.resource_pattern.pattern_type) == (
        "*",
        ACLPermissionType.ALLOW,
        ACLResourcePatternType.LITERAL,
    )
    assert (cluster.resource_pattern.resource_name, cluster.permission_type) == (
        "kafka-cluster",
        ACLPermissionType.DENY,
    )
    with pytest.raises(StreamstackError, match=r"acls\[0\]: unknown field 'operation'"):
        rendered_kafka_users([user([{"resource": {"type": "topic", "name": "t"}, "operation": "Read"}])])
    old = {**user([]), "apiVersion": "kafka.strimzi.io/v1beta2"}
    with pytest.raises(StreamstackError, match=r"expected kafka\.strimzi\.io/v1 "):
        rendered_kafka_users([old])


def test_clients_on_tls_make_the_rehearsal_use_sasl_ssl(rendered: RenderedStack) -> None:
    objects = copy.deepcopy(rendered.manifests)
    for manifest in objects:
        if manifest["kind"] == "SparkApplication":
            for key in manifest["spec"]["sparkConf"]:
                if key.endswith(".STREAMSTACK_KAFKA_SECURITY_PROTOCOL"):
                    manifest["spec"]["sparkConf"][key] = "SASL_SSL"
    with pytest.raises(StreamstackError, match="one of SASL_PLAINTEXT, SASL_SSL; found SASL_"):
        rendered_security_protocol(objects)  # the exporter still says SASL_PLAINTEXT
    for manifest in objects:
        for container in manifest.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            for variable in container.get("env", []):
                if variable["name"] == "STREAMSTACK_KAFKA_SECURITY_PROTOCOL":
                    variable["value"] = "SASL_SSL"
    assert rendered_security_protocol(objects) == "SASL_SSL"


# --- on the broker -------------------------------------------------------------------------------------


def test_the_broker_holds_the_rendered_topics_and_exactly_the_rendered_acls(
    rehearsal: RehearsalKafka, rendered: RenderedStack
) -> None:
    admin = rehearsal.admin()
    try:
        everything = ACLFilter(
            None,
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        on_broker, _ = admin.describe_acls(everything)
        described = admin.describe_topics([topic.name for topic in PIPELINE.topics])
    finally:
        admin.close()
    expected = [binding for user in rendered_kafka_users(rendered.manifests) for binding in user.bindings()]
    assert sorted(map(repr, on_broker)) == sorted(map(repr, expected))
    assert {topic["name"]: len(topic["partitions"]) for topic in described} == {
        topic.name: topic.partitions for topic in rendered_kafka_topics(rendered.manifests)
    }


def test_each_job_reads_and_writes_exactly_its_topics_and_its_shadow_groups(
    rehearsal: RehearsalKafka, rendered: RenderedStack
) -> None:
    topics = {topic.name: topic.partitions for topic in rendered_kafka_topics(rendered.manifests)}
    load_generator = users_by_secret(rehearsal.users.values())[rendered.outputs["loadGeneratorSecret"]]
    for topic in [name for name in topics if load_generator.allows("Write", "topic", name)]:
        produce(login(rehearsal, load_generator.name), topic)  # the pipeline's inputs

    for application in spark_applications(rendered):
        user = workload_kafka_users([application, *rendered.find("KafkaUser")])[
            f"SparkApplication/{application['metadata']['name']}"
        ]
        options = login(rehearsal, user.name)
        reads, writes = job_topics(application)
        # Its idempotent producers get their producer id from Write on a topic; no cluster ACL is rendered.
        assert not user.allows("IdempotentWrite", "cluster")
        for topic in sorted(writes):
            produce(options, topic)
        for topic in sorted(reads):
            group = f"spark-kafka-source-{uuid.uuid4()}-executor"
            assert read_some(options, topic, topics[topic], group) > 0, (user.name, topic)
        shadow = flags(application["spec"]["arguments"])["--shadow-group-prefix"] + user.name
        for group in (shadow, f"{shadow}.dead-letters"):
            commit(options, group, sorted(reads)[0])
        assert denied(rehearsal, user.name) == [], user.name

        # Anything else is refused by the broker and logged as a denial of this principal: a topic it has
        # no ACL for, writing a topic it only reads, reading a topic it only writes, another's group.
        unknown, read_only, write_only = (
            sorted(names)[0] for names in (set(topics) - reads - writes, reads - writes, writes - reads)
        )
        for topic in (unknown, read_only):
            with pytest.raises(TopicAuthorizationFailedError):
                produce(options, topic)
        with pytest.raises(TopicAuthorizationFailedError):
            read_some(options, write_only, topics[write_only], f"spark-kafka-source-{uuid.uuid4()}-executor")
        with pytest.raises(GroupAuthorizationFailedError):
            commit(options, "streamstack-another-job", sorted(reads)[0])
        assert denied(rehearsal, user.name) == [
            f"Denied DESCRIBE on Topic:LITERAL:{unknown} (Metadata)",
            f"Denied WRITE on Topic:LITERAL:{read_only} (Produce)",
            f"Denied READ on Topic:LITERAL:{write_only} (Fetch)",
            "Denied DESCRIBE on Group:LITERAL:streamstack-another-job (FindCoordinator)",
        ]


def test_the_lag_exporter_collects_as_its_own_user_and_may_write_nothing(
    rehearsal: RehearsalKafka, rendered: RenderedStack
) -> None:
    commit(login(rehearsal, "user-view"), "streamstack-user-view", "users")  # a shadow group for it to see

    (deployment,) = rendered.find("Deployment", "lag-exporter")
    user = kafka_user_of(deployment, rendered_kafka_users(rendered.manifests))
    assert user is not None
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    arguments = [
        arg for arg in container["args"] if "=/checkpoints/" not in arg and arg != "--checkpoint-dir"
    ]
    environment = {
        **{variable["name"]: variable["value"] for variable in container["env"] if "value" in variable},
        **rehearsal.client_environment(user.name),
        "STREAMSTACK_LAG_BOOTSTRAP_SERVERS": rehearsal.bootstrap_servers,
        "STREAMSTACK_LAG_LISTEN": "127.0.0.1:0",
    }
    config = exporter_args(arguments, env=environment)
    reader = KafkaReader(config)
    refresher = Refresher(config, reader, ExporterHealth(CollectorRegistry()))
    try:
        assert refresher.refresh()
        snapshot = refresher.latest()
    finally:
        reader.close()
    assert snapshot is not None
    assert "streamstack-user-view" in {group.group for group in snapshot.groups}
    assert denied(rehearsal, user.name) == []

    # It may write nothing: an idempotent producer does not even get a producer id (that takes Write on
    # some topic, or IdempotentWrite on the cluster), a plain one is refused the write.
    options = {"bootstrap_servers": rehearsal.bootstrap_servers, **config.security.client_options()}
    with pytest.raises(KafkaError, match="ClusterAuthorizationFailed"):
        produce(options, "users")
    with pytest.raises(TopicAuthorizationFailedError):
        produce(options, "users", idempotent=False)
    assert "Denied WRITE on Topic:LITERAL:users (Produce)" in denied(rehearsal, user.name), (
        rehearsal.acl_denials()
    )


def test_the_producers_write_the_pipeline_inputs_and_nothing_else(
    rehearsal: RehearsalKafka, rendered: RenderedStack
) -> None:
    user = users_by_secret(rehearsal.users.values())[rendered.outputs["loadGeneratorSecret"]]
    base = {key: value for key, value in os.environ.items() if not key.startswith("STREAMSTACK_KAFKA_")}
    environment = {**base, **rehearsal.client_environment(user.name), "PYTHONPATH": str(REPO_ROOT)}
    producer = PIPELINE.producer("clickstream-producer")

    def run(topic: str) -> subprocess.CompletedProcess[str]:
        command = [
            sys.executable,
            "-m",
            producer.module,
            "--bootstrap-servers",
            rehearsal.bootstrap_servers,
            "--topic",
            topic,
            "--rate",
            "500",
            "--max-events",
            "10",
        ]
        return subprocess.run(
            command, env=environment, capture_output=True, text=True, timeout=60, check=False
        )

    before = end_offsets(rehearsal, "page-views-per-url")
    sent = run(producer.topic)
    assert sent.returncode == 0, sent.stderr
    run("page-views-per-url")  # a job's output: the broker refuses every record
    assert "Denied DESCRIBE on Topic:LITERAL:page-views-per-url (Metadata)" in denied(rehearsal, user.name)
    assert end_offsets(rehearsal, "page-views-per-url") == before


def test_unauthenticated_and_wrong_password_clients_are_refused(rehearsal: RehearsalKafka) -> None:
    with pytest.raises(KafkaTimeoutError):  # no SASL handshake: the SCRAM listener drops the connection
        KafkaConsumer(bootstrap_servers=rehearsal.bootstrap_servers, bootstrap_timeout_ms=3000)
    wrong = {**rehearsal.client_options("user-view"), "sasl_plain_password": "not-the-password"}
    with pytest.raises(KafkaTimeoutError):
        KafkaConsumer(bootstrap_timeout_ms=3000, **wrong)
    log = rehearsal.kafka.log_path.read_text()
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in log
    # The PLAINTEXT listener (the broker's readiness probe) authenticates nobody: ANONYMOUS may do nothing.
    with pytest.raises(TopicAuthorizationFailedError):
        produce({"bootstrap_servers": rehearsal.kafka.bootstrap_servers}, "page-views")
    assert (
        "Denied DESCRIBE on Topic:LITERAL:page-views (Metadata)" in rehearsal.acl_denials()["User:ANONYMOUS"]
    )


def test_no_password_reaches_the_brokers_argv_or_a_log(rehearsal: RehearsalKafka) -> None:
    passwords = [rehearsal.client_options(user)["sasl_plain_password"] for user in rehearsal.users]
    authorization = rehearsal.kafka.secured.authorization if rehearsal.kafka.secured else None
    assert authorization is not None
    super_passwords = [authorization.broker_password, authorization.admin_password]
    argv = Path(f"/proc/{rehearsal.pid}/cmdline").read_bytes().decode()
    files = [path for path in rehearsal.workdir.rglob("*") if path.is_file()]
    assert any(path.name == "kafka-authorizer.log" for path in files)
    for path in files:
        content = path.read_bytes()
        for password in passwords:
            assert password.encode() not in content, path
        if path.name != "server.properties":
            for password in super_passwords:
                assert password.encode() not in content, path
    config = rehearsal.kafka.workdir / "server.properties"
    assert stat.S_IMODE(config.stat().st_mode) & 0o077 == 0  # the super users' passwords: owner only
    for password in [*passwords, *super_passwords]:
        assert password not in argv


@pytest.mark.spark
def test_a_missing_acl_fails_the_jobs_kafka_sink_with_a_denial(
    rehearsal: RehearsalKafka, rendered: RenderedStack, spark: SparkSession, tmp_path: Path
) -> None:
    """The property the rehearsal stands for: drop one ACL from a rendered KafkaUser and the job's own
    Kafka I/O (Spark's sink, Java client) fails with the broker's denial; the intact user succeeds."""
    (application,) = rendered.find("SparkApplication", "sessionization")
    output = flags(application["spec"]["arguments"])["--output-topic"]
    objects = copy.deepcopy(rendered.manifests)
    (manifest,) = [
        item
        for item in objects
        if item["kind"] == "KafkaUser" and item["metadata"]["name"] == "sessionization"
    ]
    acls = manifest["spec"]["authorization"]["acls"]
    acls[:] = [acl for acl in acls if acl["resource"].get("name") != output]  # the output topic's ACL
    manifest["metadata"]["name"] = "sessionization-missing-acl"
    (mutated,) = [user for user in rendered_kafka_users(objects) if user.name == "sessionization-missing-acl"]
    rehearsal.add_user(mutated)

    def write_as(user: str) -> None:
        streaming = replace(
            streaming_config("sessionization", rehearsal.bootstrap_servers, tmp_path, "unused"),
            kafka_security=KafkaSecurity.from_environment(rehearsal.client_environment(user)),
        )
        rows = spark.createDataFrame([("k", json.dumps({"user_id": "u"}))], "key string, value string")
        write_kafka_batch(rows, streaming, output)

    before = denied(rehearsal, "sessionization")
    write_as("sessionization")
    assert denied(rehearsal, "sessionization") == before  # the intact user: nothing refused
    with pytest.raises(Exception, match=f"TopicAuthorization.*{output}"):
        write_as(mutated.name)
    assert denied(rehearsal, mutated.name) == [f"Denied DESCRIBE on Topic:LITERAL:{output} (Metadata)"]


def test_sasl_ssl_with_the_brokers_ca(runtimes: Runtimes, tmp_path: Path) -> None:
    """The prod shape: SCRAM over TLS, the clients trusting the broker's CA through the same variables a
    cluster sets; a topic rendered for three brokers (min.insync.replicas 2) still takes writes here."""
    (user,) = rendered_kafka_users(
        [
            {
                "apiVersion": "kafka.strimzi.io/v1",
                "kind": "KafkaUser",
                "metadata": {"name": "tls-client"},
                "spec": {
                    "authentication": {"type": "scram-sha-512"},
                    "authorization": {
                        "type": "simple",
                        "acls": [
                            {
                                "resource": {"type": "topic", "name": "tls-", "patternType": "prefix"},
                                "operations": ["Write", "Read"],
                            }
                        ],
                    },
                },
            }
        ]
    )
    topics = rendered_kafka_topics(
        [
            {
                "apiVersion": "kafka.strimzi.io/v1",
                "kind": "KafkaTopic",
                "metadata": {"name": "tls-events"},
                "spec": {"partitions": 1, "replicas": 3, "config": {"min.insync.replicas": 2}},
            }
        ]
    )
    with RehearsalKafka(runtimes, tmp_path / "tls", [user], topics, tls=True) as kafka:
        environment = kafka.client_environment(user.name)
        assert environment["STREAMSTACK_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
        assert environment["STREAMSTACK_KAFKA_SSL_CA_FILE"] == str(kafka.ca_file)
        options = login(kafka, user.name)
        produce(options, "tls-events")
        assert read_some(options, "tls-events", 1, None) == 1
        with pytest.raises(KafkaTimeoutError):  # SCRAM without TLS on the TLS listener
            KafkaConsumer(bootstrap_timeout_ms=3000, **{**options, "security_protocol": "SASL_PLAINTEXT"})

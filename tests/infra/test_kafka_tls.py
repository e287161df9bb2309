"""Kafka clients over TLS where the stack says so (`kafka.clientTls`: prod true, dev false).

In prod every job (driver and executors: both run Kafka clients) and the lag exporter talk SASL_SSL to the
`tls` listener and trust Strimzi's cluster CA, which the program reads from `<cluster>-cluster-ca-cert` in
the Kafka namespace once the Kafka is Ready and copies into the jobs' namespace (a pod mounts only Secrets
of its own namespace). Dev stays SASL_PLAINTEXT on the plain SCRAM listener. The rendered objects are checked
as `streamstack render` produces them and against the Kubernetes schemas and the CRDs.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from pulumi.runtime import rpc

from infra.components.kafka_ca import ca_bundle
from infra.config import ConfigError
from streamstack.render import RenderedStack, render_stack
from streamstack.render import validate as k8s_validation
from tests.infra.conftest import (
    CLUSTER_CA_PEM,
    OLD_CLUSTER_CA_PEM,
    Stack,
    load_config,
    run_program,
    stack_sections,
)

CA_SECRET = "streamstack-cluster-ca-cert"
SECRET_TYPE = "kubernetes:core/v1:Secret"
CA_FILE = "STREAMSTACK_KAFKA_SSL_CA_FILE"


@pytest.fixture(scope="module", params=["dev", "prod"])
def rendered(request: pytest.FixtureRequest) -> RenderedStack:
    return render_stack(request.param)


def client_listener(rendered: RenderedStack, tls: bool) -> dict[str, Any]:
    (kafka,) = rendered.find("Kafka")
    (listener,) = [item for item in kafka["spec"]["kafka"]["listeners"] if item["tls"] is tls]
    assert listener["authentication"] == {"type": "scram-sha-512"}
    assert isinstance(listener, dict)
    return listener


def role_environment(conf: dict[str, str], role: str) -> dict[str, str]:
    prefix = "spark.kubernetes.driverEnv." if role == "driver" else "spark.executorEnv."
    return {key.removeprefix(prefix): value for key, value in conf.items() if key.startswith(prefix)}


def exporter_pod(rendered: RenderedStack) -> tuple[dict[str, Any], dict[str, Any]]:
    (deployment,) = rendered.find("Deployment", "lag-exporter")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def test_the_stacks_clients_use_tls_exactly_when_clienttls_says(rendered: RenderedStack) -> None:
    tls = load_config(rendered.stack).kafka.client_tls
    assert tls is (rendered.stack == "prod")
    listener = client_listener(rendered, tls)
    bootstrap = f"streamstack-kafka-bootstrap.kafka.svc:{listener['port']}"
    assert listener["port"] == (9093 if tls else 9092)
    assert rendered.outputs["kafkaBootstrapServers"] == bootstrap
    protocol = "SASL_SSL" if tls else "SASL_PLAINTEXT"
    copies = [secret for secret in rendered.find("Secret") if secret["metadata"]["name"] == CA_SECRET]
    applications = rendered.find("SparkApplication")
    assert len(applications) == len(load_config(rendered.stack).jobs)
    for application in applications:
        spec = application["spec"]
        assert spec["arguments"][:2] == ["--bootstrap-servers", bootstrap]
        conf = spec["sparkConf"]
        for role in ("driver", "executor"):  # executors read and write Kafka too
            environment = role_environment(conf, role)
            assert environment["STREAMSTACK_KAFKA_SECURITY_PROTOCOL"] == protocol
            mounts = {
                key.removeprefix(f"spark.kubernetes.{role}.secrets."): value
                for key, value in conf.items()
                if key.startswith(f"spark.kubernetes.{role}.secrets.")
            }
            if tls:
                # The CA copy, mounted on this role, and the file the job hands Spark as its PEM truststore.
                assert mounts == {CA_SECRET: "/etc/streamstack/kafka-ca"}
                assert environment[CA_FILE] == "/etc/streamstack/kafka-ca/ca.crt"
            else:
                assert mounts == {} and CA_FILE not in environment
    pod, container = exporter_pod(rendered)
    environment = {item["name"]: item.get("value") for item in container["env"]}
    assert environment["STREAMSTACK_LAG_BOOTSTRAP_SERVERS"] == bootstrap
    assert environment["STREAMSTACK_KAFKA_SECURITY_PROTOCOL"] == protocol
    ca_volumes = [volume for volume in pod["volumes"] if "secret" in volume]
    if tls:
        (copy,) = copies
        (deployment,) = rendered.find("Deployment", "lag-exporter")
        namespace = copy["metadata"]["namespace"]
        assert namespace == application["metadata"]["namespace"] == deployment["metadata"]["namespace"]
        assert list(copy["data"]) == ["ca.crt"]
        assert rendered.outputs["kafkaCaSecret"] == CA_SECRET
        (volume,) = ca_volumes
        assert volume["secret"]["secretName"] == CA_SECRET
        (mount,) = [item for item in container["volumeMounts"] if item["name"] == volume["name"]]
        assert mount["readOnly"] is True
        assert environment[CA_FILE] == f"{mount['mountPath']}/ca.crt"
    else:
        assert copies == [] and ca_volumes == [] and CA_FILE not in environment
        assert "kafkaCaSecret" not in rendered.outputs


def test_the_tls_wiring_validates_against_the_schemas_and_the_crds(rendered: RenderedStack) -> None:
    objects = [
        manifest
        for manifest in rendered.manifests
        if manifest["kind"] in ("SparkApplication", "Deployment", "Secret", "Kafka")
    ]
    assert {manifest["kind"] for manifest in objects} >= {"SparkApplication", "Deployment", "Kafka"}
    assert k8s_validation.validate_manifests(objects, rendered.kubernetes_version) == []


def test_prod_copies_every_certificate_of_the_cluster_ca_after_kafka_is_ready(
    mocked: Callable[[str], Stack],
) -> None:
    stack = run_program(mocked, "prod")
    # Read from the Kafka namespace (Strimzi creates it there), once.
    assert stack.mocks.reads == [(SECRET_TYPE, f"kafka/{CA_SECRET}")]
    copy = stack.named("Secret", CA_SECRET)
    assert copy.metadata["namespace"] == "streaming"
    assert not any(label.startswith("strimzi.io/") for label in copy.metadata.get("labels", {}))
    # Mid-renewal Strimzi holds the new certificate as ca.crt and the replaced one as ca-<date>.crt: the copy
    # trusts both, the current one first; the PKCS12 store and its password stay behind.
    data = copy.inputs["data"]
    assert data[rpc._special_sig_key] == rpc._special_secret_sig  # a Secret's data stays a Pulumi secret
    assert set(data["value"]) == {"ca.crt"}
    assert base64.b64decode(data["value"]["ca.crt"]).decode() == CLUSTER_CA_PEM + OLD_CLUSTER_CA_PEM
    # Order: the copy comes after the Kafka cluster (its Secret exists once Kafka is Ready), every job and the
    # exporter after the copy.
    (ca,) = [r for r in stack.resources() if r.typ == "streamstack:kafka:KafkaClusterCa"]
    kafka = stack.named("Kafka", "streamstack")
    assert kafka.urn in ca.dependencies
    clients = [
        r
        for r in stack.resources()
        if r.typ in ("streamstack:jobs:StreamingJob", "streamstack:monitoring:LagExporter")
    ]
    assert len(clients) == len(load_config("prod").jobs) + 1
    assert all(copy.urn in client.dependencies for client in clients)


def test_dev_reads_no_ca_and_copies_nothing(mocked: Callable[[str], Stack]) -> None:
    stack = run_program(mocked, "dev")
    assert stack.mocks.reads == []
    assert not [r for r in stack.of_kind("Secret") if r.metadata.get("name") == CA_SECRET]


def test_client_tls_is_on_unless_a_stack_turns_it_off_and_is_checked_by_name() -> None:
    kafka = stack_sections("prod")["kafka"]
    assert load_config("prod").kafka.client_tls is True
    assert load_config("dev").kafka.client_tls is False
    unset = {key: value for key, value in kafka.items() if key != "clientTls"}
    assert load_config("prod", kafka=unset).kafka.client_tls is True
    with pytest.raises(ConfigError, match=r"^streamstack:kafka\.clientTls: expected true or false, got 'ye"):
        load_config("prod", kafka={**kafka, "clientTls": "yes"})


def test_a_ca_secret_without_its_certificate_fails_naming_the_secret() -> None:
    with pytest.raises(ValueError, match=f"Secret kafka/{CA_SECRET} has no ca.crt"):
        ca_bundle({"ca.p12": "eA=="}, f"kafka/{CA_SECRET}")

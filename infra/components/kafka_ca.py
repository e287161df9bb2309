"""KafkaClusterCa: Strimzi's cluster CA certificate, copied into the namespace of the Kafka clients.

With `kafka.clientTls` the jobs and the exporter talk SASL_SSL to the `tls` listener, whose certificates the
Cluster Operator signs with its own cluster CA; clients trust it through the public half, the Secret
`<cluster>-cluster-ca-cert` (key `ca.crt`) that Strimzi creates in the Kafka namespace only. A pod can mount
a Secret of its own namespace only, so this component reads that Secret (`Secret.get`) once the `Kafka` is
Ready and writes a copy of the same name into the clients' namespace, where the charts mount it on the
driver, every executor and the exporter.

Why a copy made by the program, not something running in the cluster: the stack has no controller that syncs
Secrets across namespaces (cert-manager's trust-manager, reflector) and adding one for a public certificate
is more to run than it is worth; Strimzi's KafkaUser Secrets carry the *clients* CA, not the cluster CA. The
read happens on every `pulumi up`/`preview`, so the copy follows the source whenever the stack is updated.
Strimzi renews its cluster CA (365 days valid, renewed in the last 30 by default): during a renewal the
Secret holds the new certificate as `ca.crt` and a replaced one as `ca-<date>.crt`, and the copy bundles
every certificate (`ca.crt` first), so clients trust both until the old one is gone. Run `pulumi up` in that
window (or after `kubectl annotate ... strimzi.io/force-renew`), then restart the jobs: a JVM reads its
truststore when the Kafka client starts.

The read's id is derived from the `Kafka` resource's id: on a first preview (the Kafka not created yet) the id
is unknown and the engine skips the read (its outputs stay unknown) instead of failing on a missing Secret.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as kubernetes

from infra.components.common import child, metadata
from infra.config import KafkaConfig
from infra.kafka_access import CA_KEY

CERTIFICATE_SUFFIX = ".crt"


@dataclass(frozen=True, kw_only=True)
class KafkaClusterCaArgs:
    kafka: KafkaConfig
    # The namespace of the clients (the jobs' namespace), where the copy goes.
    namespace: str
    # The Strimzi `Kafka` resource (awaited until Ready): its cluster CA Secret exists then.
    kafka_resource: pulumi.CustomResource


def ca_bundle(data: Mapping[str, str] | None, source: str) -> str:
    """Every certificate of Strimzi's CA Secret (`data`, base64 as in a Secret) as one base64 PEM bundle,
    the current `ca.crt` first; the PKCS12 store and its password are left behind."""
    data = data or {}
    if CA_KEY not in data:
        raise ValueError(f"Secret {source} has no {CA_KEY} (keys: {', '.join(sorted(data)) or 'none'})")
    names = [CA_KEY, *sorted(key for key in data if key.endswith(CERTIFICATE_SUFFIX) and key != CA_KEY)]
    pems = [base64.b64decode(data[name]).decode("ascii").strip() + "\n" for name in names]
    return base64.b64encode("".join(pems).encode("ascii")).decode("ascii")


class KafkaClusterCa(pulumi.ComponentResource):
    """The cluster CA certificate of the Kafka cluster, as the Secret `<cluster>-cluster-ca-cert` (key
    `ca.crt`) in the clients' namespace."""

    secret_name: str
    secret: kubernetes.core.v1.Secret

    def __init__(
        self, name: str, args: KafkaClusterCaArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("streamstack:kafka:KafkaClusterCa", name, None, opts)
        kafka = args.kafka
        source_id = f"{kafka.namespace}/{kafka.cluster_ca_secret}"
        source = kubernetes.core.v1.Secret.get(
            f"{name}-source",
            args.kafka_resource.id.apply(lambda _: source_id),
            opts=child(self, [args.kafka_resource]),
        )
        self.secret_name = kafka.cluster_ca_secret
        self.secret = kubernetes.core.v1.Secret(
            name,
            # No strimzi.io labels: the User Operator watching this namespace must not take it for its own.
            metadata=metadata(self.secret_name, args.namespace),
            type="Opaque",
            data={CA_KEY: source.data.apply(lambda data: ca_bundle(data, source_id))},
            opts=child(self, [source]),
        )
        self.register_outputs({"secret_name": self.secret_name})

"""LagExporter: `monitoring/lag_exporter`, installed from our chart `charts/lag-exporter` (Deployment,
Service, ServiceAccount, ServiceMonitor and NetworkPolicy: one source of truth for those objects).

Like StreamingJob it goes in as a `helm.v4.Chart`, so Pulumi manages every object and `pulumi up` waits until
the Deployment is available. The exporter reads the shadow consumer groups the jobs commit (shadow prefix and
`--group-allow` limited to the groups its KafkaUser may describe) and, with `lagExporter.readCheckpoints`,
every job's checkpoint claim mounted read-only at `/checkpoints/<job>`. The SASL password comes from its
KafkaUser's Secret by reference (`password` key), never a flag or a value; with `kafka.clientTls` it uses
SASL_SSL on the TLS listener, trusting the cluster CA mounted from KafkaClusterCa's copy. The release is named
`lag-exporter`, so its Service, and with it Prometheus' `job` label, are `lag-exporter` as in the local stack.

With change data capture (`streamstack:cdc`) it also reads the Debezium connector's replication slot
(`--postgres-*`, monitoring/lag_exporter/postgres_source.py), as the local stack does: `slot_source` takes the
host, port, database and slot from what Kafka Connect is given (contracts/cdc.py's `CdcSource`, the stack's
`cdc.database`), logs in as Connect's user and reads the password as a file of Connect's own Secret
(`cdc-database-credentials`, same namespace), and egresses to the same destination as Connect
(`DatabasePeer`). The WAL disk size is the in-cluster database's volume (`storageSize`, which also holds the
data: an upper bound); for an external database it is 0, i.e. not exported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from contracts.cdc import CdcSource
from infra.components.common import KafkaClientArgs, child
from infra.config import (
    LAG_EXPORTER_CHART,
    ConfigError,
    DatabaseConfig,
    ImageReference,
    JobConfig,
    LagExporterConfig,
    image_reference,
    require_exporter_reach,
    setting,
)
from infra.config.cdc import memory_bytes
from infra.kafka_access import exporter_group_allow
from infra.network import DatabasePeer

NAME = "lag-exporter"


@dataclass(frozen=True, kw_only=True)
class SlotSource:
    """The CDC connector's replication slot, where the exporter reads it: the chart's `postgres` values and
    its egress (`peer`, the same as Kafka Connect's)."""

    host: str
    port: int
    user: str
    database: str
    slot: str
    password_secret: str
    password_key: str
    wal_disk_bytes: int
    peer: DatabasePeer

    def chart_values(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "database": self.database,
            "slot": self.slot,
            "passwordSecret": {"name": self.password_secret, "key": self.password_key},
            "walDiskBytes": self.wal_disk_bytes,
        }


def slot_source(
    source: CdcSource,
    database: DatabaseConfig,
    *,
    host: str,
    port: int,
    peer: DatabasePeer,
    password_secret: str,
    password_key: str,
) -> SlotSource:
    """The slot of the connector Kafka Connect runs: `source` (with the external database's name when one is
    set), `host`/`port`/`peer` and the password Secret exactly as Connect is given them."""
    return SlotSource(
        host=host,
        port=port,
        user=database.user,
        database=source.database,
        slot=source.slot_name,
        password_secret=password_secret,
        password_key=password_key,
        # In the cluster the claim holds PGDATA with pg_wal: its size bounds the WAL; an external database
        # states the size of its pg_wal volume (cdc.database.external.walDiskSize).
        wal_disk_bytes=memory_bytes(database.wal_disk_size),
        peer=peer,
    )


@dataclass(frozen=True, kw_only=True)
class LagExporterArgs(KafkaClientArgs):
    exporter: LagExporterConfig
    namespace: str
    shadow_group_prefix: str
    jobs: tuple[JobConfig, ...]
    # The CDC replication slot (None: no change data capture, no `--postgres-*` flags).
    source: SlotSource | None = None

    def __post_init__(self) -> None:
        if self.exporter.image is None:
            raise ConfigError(f"{setting('lagExporter.image')}: required to deploy the exporter")
        require_exporter_reach(self.exporter, self.jobs, self.cluster_nodes)

    @property
    def image(self) -> ImageReference:
        return image_reference(setting("lagExporter.image"), self.exporter.image or "")

    @property
    def checkpoint_jobs(self) -> Sequence[JobConfig]:
        return self.jobs if self.exporter.read_checkpoints else ()


def chart_values(args: LagExporterArgs) -> dict[str, Any]:
    """The lag-exporter chart's values; the chart's defaults fill in the rest (resources a setting leaves
    out, the restricted security contexts, probes)."""
    exporter = args.exporter
    user = exporter.run_as_user
    values: dict[str, Any] = {
        "fullnameOverride": NAME,
        "image": args.image.chart_values(exporter.image_pull_policy),
        "kafka": args.kafka.chart_values(),
        "exporter": {
            "port": exporter.port,
            "refreshInterval": exporter.refresh_interval,
            "window": exporter.window,
            "shadowPrefix": args.shadow_group_prefix,
            # Only the groups its ACLs let it describe.
            "groupAllow": [exporter_group_allow(args.shadow_group_prefix)],
            "logLevel": exporter.log_level,
        },
        "checkpoints": [
            {"name": job.name, "claimName": job.checkpoint_claim} for job in args.checkpoint_jobs
        ],
        "podSecurityContext": {"runAsUser": user, "runAsGroup": user, "fsGroup": user},
        "networkPolicy": args.peers.chart_values(),
    }
    if args.source is not None:
        values["postgres"] = args.source.chart_values()
        values["networkPolicy"]["postgres"] = args.source.peer.chart_values()
    resources = exporter.resources.as_dict()
    if resources:
        values["resources"] = resources
    return values


class LagExporter(pulumi.ComponentResource):
    """The lag-exporter chart: the exporter, its Service (port `metrics`) and the ServiceMonitor on it."""

    chart: kubernetes.helm.v4.Chart

    def __init__(self, name: str, args: LagExporterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("streamstack:monitoring:LagExporter", name, None, opts)
        self.chart = kubernetes.helm.v4.Chart(
            name,
            kubernetes.helm.v4.ChartArgs(
                chart=str(LAG_EXPORTER_CHART), name=NAME, namespace=args.namespace, values=chart_values(args)
            ),
            opts=child(self),
        )
        self.register_outputs({"service": NAME})

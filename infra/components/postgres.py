"""Postgres: the in-cluster PostgreSQL that change data capture reads in the dev stack
(`streamstack:cdc.database.inCluster`), as a plain StatefulSet of this program.

Why a StatefulSet and not an operator (CloudNativePG): every object here validates against the pinned
Kubernetes schemas (kubernetes-validate), while CloudNativePG's CRDs are not among the vendored ones and its
operator would be one more release to pin, vendor and keep under a Pod Security level. One pod with a claim is
what the dev stack needs; production uses an external, managed PostgreSQL (`cdc.database.external`).

- The official `postgres` image at the pinned tag (15.20 in dev, the local runtime's Debian
  postgresql-15), run as its `postgres` user (uid 999) under the namespace's Pod Security `restricted`
  level: no privilege escalation, no capabilities, read-only root filesystem (the socket directory and /tmp
  are emptyDirs), RuntimeDefault seccomp.
- `wal_level=logical` with room for the connector's slot and sender, and `max_slot_wal_keep_size`: a slot
  whose connector stopped reading invalidates once it retains that much WAL, instead of filling the disk
  (the connector then needs a new snapshot: README.md, runbook).
- The login Debezium uses is the image's superuser (`POSTGRES_USER`, `cdc.database.user`), so it may create
  the publication and the replication slot; its password is the stack secret `cdcDatabasePassword`, in a
  Secret of this namespace mounted as a file (`POSTGRES_PASSWORD_FILE`), never an environment variable.
- The namespace denies all traffic but Kafka Connect -> PostgreSQL, with load generators the dev
  application workload (jobs.producers.cdc_workload), which creates and writes the tables, and with the lag
  exporter the exporter, which reads the connector's replication slot (infra/network.py, postgres_policies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pulumi
import pulumi_kubernetes as kubernetes

from infra import network
from infra.components.common import child, metadata, network_policies, platform_namespace
from infra.config import InClusterDatabase

NAME = "postgres"
PASSWORD_KEY = "password"
# The password reaches the server as a file of the mounted Secret (the image's POSTGRES_PASSWORD_FILE), not
# as an environment variable.
CREDENTIALS_DIR = "/etc/postgres-credentials"
DATA_DIR = "/var/lib/postgresql/data"
# A subdirectory of the claim: initdb wants an empty directory it owns, and a volume's root may hold
# lost+found.
PGDATA = f"{DATA_DIR}/pgdata"
# Room for the connector's slot (and a second one while a connector is replaced), and their WAL senders.
MAX_REPLICATION_SLOTS = 4
MAX_WAL_SENDERS = 4


@dataclass(frozen=True, kw_only=True)
class PostgresArgs:
    database: InClusterDatabase
    # The database Debezium reads (pipeline.yaml's sources.cdc.database) and the login it uses.
    database_name: str
    user: str
    password: pulumi.Input[str]
    # Where Kafka Connect runs (the only client the namespace admits, with the workload below).
    connect_namespace: str
    connect_name: str
    # Whether the dev application workload (load generators in Connect's namespace, running
    # jobs.producers.cdc_workload) may write the tables; it creates them (`--schema-only`) before Debezium's
    # publication can name them.
    workload: bool = False
    # Whether the lag exporter (Connect's namespace) reads the connector's replication slot.
    exporter: bool = False


def server_args(database: InClusterDatabase) -> list[str]:
    """The server settings change data capture needs, as `postgres -c` arguments."""
    settings = {
        "wal_level": "logical",
        "max_replication_slots": str(MAX_REPLICATION_SLOTS),
        "max_wal_senders": str(MAX_WAL_SENDERS),
        "max_slot_wal_keep_size": f"{database.max_slot_wal_keep_size_mb}MB",
    }
    return [argument for key, value in settings.items() for argument in ("-c", f"{key}={value}")]


def checkov_skips(database: InClusterDatabase) -> dict[str, str]:
    """The checkov findings the StatefulSet accepts, each with its reason (`checkov.io/skip<n>` annotations,
    as our charts do)."""
    skips = [
        "CKV_K8S_15=IfNotPresent: the tag is an immutable release pin, and kind runs images loaded with "
        "`kind load`.",
        "CKV_K8S_40=The official image's `postgres` user is uid 999 and owns its directories; the uid is "
        "cdc.database.inCluster.runAsUser.",
    ]
    if "@" not in database.image:
        skips.insert(
            0,
            "CKV_K8S_43=Pinned by tag (cdc.database.inCluster.image, never latest); append @sha256:<digest> "
            "to pin by digest.",
        )
    return {f"checkov.io/skip{index}": skip for index, skip in enumerate(skips, start=1)}


def statefulset_spec(args: PostgresArgs, secret_name: str) -> dict[str, Any]:
    database = args.database
    labels = dict(network.POSTGRES_POD_LABELS)
    ready = ["pg_isready", "--host", "127.0.0.1", "--username", args.user, "--dbname", args.database_name]
    claim: dict[str, Any] = {
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": database.storage_size}},
        },
    }
    if database.storage_class:
        claim["spec"]["storageClassName"] = database.storage_class
    container: dict[str, Any] = {
        "name": NAME,
        "image": database.image,
        "imagePullPolicy": "IfNotPresent",
        "args": server_args(database),
        "env": [
            {"name": "POSTGRES_USER", "value": args.user},
            {"name": "POSTGRES_DB", "value": args.database_name},
            {"name": "POSTGRES_PASSWORD_FILE", "value": f"{CREDENTIALS_DIR}/{PASSWORD_KEY}"},
            {"name": "PGDATA", "value": PGDATA},
        ],
        "ports": [{"name": NAME, "containerPort": network.POSTGRES_PORT, "protocol": "TCP"}],
        "readinessProbe": {"exec": {"command": ready}, "periodSeconds": 10, "timeoutSeconds": 5},
        "livenessProbe": {
            "exec": {"command": ready},
            "initialDelaySeconds": 30,
            "periodSeconds": 20,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": database.run_as_user,
            "runAsGroup": database.run_as_user,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "run", "mountPath": "/var/run/postgresql"},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "credentials", "mountPath": CREDENTIALS_DIR, "readOnly": True},
        ],
    }
    resources = database.resources.as_dict()
    if resources:
        container["resources"] = resources
    return {
        "serviceName": NAME,
        "replicas": 1,
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": database.run_as_user,
                    "runAsGroup": database.run_as_user,
                    "fsGroup": database.run_as_user,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [container],
                "volumes": [
                    {"name": "run", "emptyDir": {}},
                    {"name": "tmp", "emptyDir": {}},
                    {"name": "credentials", "secret": {"secretName": secret_name, "defaultMode": 0o440}},
                ],
            },
        },
        "volumeClaimTemplates": [claim],
    }


class Postgres(pulumi.ComponentResource):
    """An in-cluster PostgreSQL for change data capture; Kafka Connect reaches it at `host`:`port`."""

    host: str
    port: int
    statefulset: kubernetes.apps.v1.StatefulSet

    def __init__(self, name: str, args: PostgresArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("streamstack:cdc:Postgres", name, None, opts)
        namespace = args.database.namespace
        created, policies = platform_namespace(
            self,
            name,
            namespace,
            network.postgres_policies(
                namespace, args.connect_namespace, args.connect_name, args.workload, args.exporter
            ),
        )
        if args.workload:
            policies += network_policies(
                self, name, [network.workload_database_policy(args.connect_namespace, namespace)]
            )
        secret = kubernetes.core.v1.Secret(
            f"{name}-credentials",
            metadata=metadata(f"{NAME}-credentials", namespace),
            type="Opaque",
            string_data={PASSWORD_KEY: args.password},
            opts=child(self, [created]),
        )
        labels = dict(network.POSTGRES_POD_LABELS)
        service = kubernetes.core.v1.Service(
            f"{name}-service",
            metadata=metadata(NAME, namespace, labels),
            spec=cast(
                Any,
                {
                    "selector": labels,
                    "ports": [
                        {
                            "name": NAME,
                            "port": network.POSTGRES_PORT,
                            "targetPort": NAME,
                            "protocol": "TCP",
                        }
                    ],
                },
            ),
            opts=child(self, [created]),
        )
        self.statefulset = kubernetes.apps.v1.StatefulSet(
            f"{name}-statefulset",
            metadata=metadata(NAME, namespace, labels, checkov_skips(args.database)),
            # Kubernetes' own (camelCase) field names, which the SDK sends as they are.
            spec=cast(Any, statefulset_spec(args, f"{NAME}-credentials")),
            opts=child(self, [created, *policies, secret, service]),
        )
        self.host = f"{NAME}.{namespace}.svc"
        self.port = network.POSTGRES_PORT
        self.register_outputs({"host": self.host, "port": self.port})

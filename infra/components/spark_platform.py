"""SparkPlatform: the Kubeflow spark-operator (Helm), the jobs' namespace, and the driver's service account
with the least RBAC a Spark driver needs.

The operator's mutating webhook is off: every SparkApplication of this stack reaches its pods through Spark
conf and pod templates (volumes, env, security contexts, ports), and with the webhook on, a webhook outage
would block pod creation in the jobs' namespace (its failurePolicy is Fail).

Both namespaces deny all traffic by default (infra/network.py): the operator may only reach the Kubernetes
API and be scraped by Prometheus; in the jobs' namespace each workload's chart brings its own allow rules.
The policies exist before the operator's release, so no pod runs without them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as kubernetes

from infra import network
from infra.components.common import child, metadata, platform_namespace
from infra.components.crds import custom_resource_definitions, load_crds
from infra.config import SparkConfig, setting

SPARK_OPERATOR_REPOSITORY = "https://kubeflow.github.io/spark-operator"
DRIVER_ROLE = "spark-driver"
# One image to pull on a cold node (tests/infra/test_sizing.py); helm.v3.Release waits 300 s by default.
OPERATOR_TIMEOUT_S = 600
# What a driver does in its namespace: create its executors' pods and ConfigMap, watch them, label idle
# executors (patch) and delete them all when it stops; delete its own Service on termination; list claims
# to reuse executors' on-demand volumes. Executors never call the API.
DRIVER_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pods", ("get", "list", "watch", "create", "patch", "delete", "deletecollection")),
    ("configmaps", ("get", "list", "create", "delete", "deletecollection")),
    ("services", ("get", "list", "delete", "deletecollection")),
    ("persistentvolumeclaims", ("get", "list", "watch")),
)


@dataclass(frozen=True, kw_only=True)
class SparkPlatformArgs:
    spark: SparkConfig
    monitoring_namespace: str
    # The Kubernetes API server's endpoint addresses (cluster.apiServerCidrs): the operators' API egress.
    api_server_cidrs: tuple[str, ...] = ()


class SparkPlatform(pulumi.ComponentResource):
    """spark-operator 2.5.2 watching the jobs' namespace, and the `spark` service account drivers run as."""

    jobs_namespace: pulumi.Output[str]
    service_account: pulumi.Output[str]
    operator: kubernetes.helm.v3.Release

    def __init__(
        self, name: str, args: SparkPlatformArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("streamstack:spark:SparkPlatform", name, None, opts)
        spark = args.spark
        operator_namespace, operator_policies = platform_namespace(
            self,
            name,
            spark.operator_namespace,
            network.spark_operator_policies(
                spark.operator_namespace, args.monitoring_namespace, args.api_server_cidrs
            ),
            logical_name=f"{name}-operator-namespace",
        )
        jobs_namespace, _ = platform_namespace(
            self,
            name,
            spark.jobs_namespace,
            network.jobs_namespace_policies(spark.jobs_namespace),
            logical_name=f"{name}-jobs-namespace",
        )
        # spark-operator's CRDs of the pinned chart version (infra/components/crds.py); the release skips
        # its own.
        crds = custom_resource_definitions(
            self,
            name,
            load_crds("spark-operator", spark.operator_chart_version, setting("spark.operatorChartVersion")),
        )
        self.operator = kubernetes.helm.v3.Release(
            f"{name}-operator",
            kubernetes.helm.v3.ReleaseArgs(
                name="spark-operator",
                chart="spark-operator",
                version=spark.operator_chart_version,
                repository_opts=kubernetes.helm.v3.RepositoryOptsArgs(repo=SPARK_OPERATOR_REPOSITORY),
                namespace=operator_namespace.metadata.name,
                values={
                    "image": {"tag": spark.operator_chart_version},
                    "spark": {
                        "jobNamespaces": [spark.jobs_namespace],
                        # This component makes the driver's account and its least Role itself.
                        "serviceAccount": {"create": False},
                        "rbac": {"create": False},
                    },
                    "webhook": {"enable": False},
                    "prometheus": {"metrics": {"enable": True}, "podMonitor": {"create": True}},
                },
                cleanup_on_fail=True,
                timeout=OPERATOR_TIMEOUT_S,
                skip_crds=True,
            ),
            opts=child(self, [operator_namespace, jobs_namespace, *operator_policies, *crds]),
        )
        account = kubernetes.core.v1.ServiceAccount(
            f"{name}-driver-account",
            metadata=metadata(spark.service_account, spark.jobs_namespace),
            opts=child(self, [jobs_namespace]),
        )
        role = kubernetes.rbac.v1.Role(
            f"{name}-driver-role",
            metadata=metadata(DRIVER_ROLE, spark.jobs_namespace),
            rules=[
                kubernetes.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=[resource], verbs=list(verbs))
                for resource, verbs in DRIVER_RULES
            ],
            opts=child(self, [jobs_namespace]),
        )
        kubernetes.rbac.v1.RoleBinding(
            f"{name}-driver-binding",
            metadata=metadata(DRIVER_ROLE, spark.jobs_namespace),
            role_ref=kubernetes.rbac.v1.RoleRefArgs(
                api_group="rbac.authorization.k8s.io", kind="Role", name=DRIVER_ROLE
            ),
            subjects=[
                kubernetes.rbac.v1.SubjectArgs(
                    kind="ServiceAccount", name=spark.service_account, namespace=spark.jobs_namespace
                )
            ],
            opts=child(self, [account, role]),
        )
        self.jobs_namespace = jobs_namespace.metadata.name
        self.service_account = account.metadata.name
        self.register_outputs(
            {"jobs_namespace": self.jobs_namespace, "service_account": self.service_account}
        )

"""The manifest and Helm-values validator: real schemas (kubernetes-validate, the CRDs in ../shared/crds, the
charts' values.yaml in ../shared/upstream-values), strict enough that a misspelt field fails."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from streamstack.render import validate as k8s_validation
from streamstack.render.validate import (
    ValidationSetupError,
    check_chart_values,
    validate_manifest,
    validate_manifests,
)


def kafka() -> dict[str, Any]:
    return {
        "apiVersion": "kafka.strimzi.io/v1",
        "kind": "Kafka",
        "metadata": {
            "name": "events",
            "namespace": "kafka",
            "annotations": {"strimzi.io/node-pools": "enabled"},
        },
        "spec": {
            "kafka": {
                "version": "4.3.1",
                "metadataVersion": "4.3-IV0",
                "listeners": [{"name": "plain", "port": 9092, "type": "internal", "tls": False}],
                "config": {"offsets.topic.replication.factor": 1, "min.insync.replicas": 1},
                "metricsConfig": {
                    "type": "jmxPrometheusExporter",
                    "valueFrom": {"configMapKeyRef": {"name": "kafka-metrics", "key": "kafka-metrics.yaml"}},
                },
            },
            "entityOperator": {"topicOperator": {}, "userOperator": {}},
        },
    }


def kafka_node_pool() -> dict[str, Any]:
    return {
        "apiVersion": "kafka.strimzi.io/v1",
        "kind": "KafkaNodePool",
        "metadata": {"name": "dual-role", "namespace": "kafka", "labels": {"strimzi.io/cluster": "events"}},
        "spec": {
            "replicas": 1,
            "roles": ["controller", "broker"],
            "storage": {
                "type": "jbod",
                "volumes": [
                    {
                        "id": 0,
                        "type": "persistent-claim",
                        "size": "10Gi",
                        "deleteClaim": False,
                        "kraftMetadata": "shared",
                    }
                ],
            },
            "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        },
    }


def kafka_topic() -> dict[str, Any]:
    return {
        "apiVersion": "kafka.strimzi.io/v1",
        "kind": "KafkaTopic",
        "metadata": {"name": "clicks", "namespace": "kafka", "labels": {"strimzi.io/cluster": "events"}},
        "spec": {
            "partitions": 3,
            "replicas": 1,
            "config": {"retention.ms": 604800000, "cleanup.policy": "delete"},
        },
    }


def kafka_user() -> dict[str, Any]:
    return {
        "apiVersion": "kafka.strimzi.io/v1",
        "kind": "KafkaUser",
        "metadata": {"name": "windows-job", "namespace": "kafka", "labels": {"strimzi.io/cluster": "events"}},
        "spec": {
            "authentication": {"type": "scram-sha-512"},
            "authorization": {
                "type": "simple",
                "acls": [
                    {
                        "resource": {"type": "topic", "name": "clicks", "patternType": "literal"},
                        "operations": ["Read", "Describe"],
                    }
                ],
            },
        },
    }


def spark_application() -> dict[str, Any]:
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "clickstream-windows", "namespace": "jobs"},
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "image": "streamstack/jobs:0.1.0",
            "imagePullPolicy": "IfNotPresent",
            "mainApplicationFile": "local:///opt/streamstack/jobs/clickstream/main.py",
            "sparkVersion": "4.0.1",
            "restartPolicy": {
                "type": "Always",
                "onFailureRetryInterval": 10,
                "onSubmissionFailureRetryInterval": 20,
            },
            "sparkConf": {
                "spark.kubernetes.driver.volumes.persistentVolumeClaim.checkpoints.mount.path": "/ckpt",
                "spark.kubernetes.driver.volumes.persistentVolumeClaim.checkpoints.options.claimName": "ckpt",
            },
            "driver": {
                "cores": 1,
                "memory": "1g",
                "serviceAccount": "spark-driver",
                "labels": {"app.kubernetes.io/name": "clickstream-windows"},
                "ports": [{"name": "metrics", "containerPort": 9401, "protocol": "TCP"}],
            },
            "executor": {"instances": 1, "cores": 1, "memory": "1g"},
        },
    }


def pod_monitor() -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "clickstream-windows", "namespace": "jobs"},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "clickstream-windows"}},
            "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s"}],
        },
    }


def service_monitor() -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "lag-exporter", "namespace": "monitoring"},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "lag-exporter"}},
            "namespaceSelector": {"matchNames": ["monitoring"]},
            "endpoints": [{"port": "metrics", "interval": "30s", "scrapeTimeout": "10s"}],
        },
    }


def prometheus_rule() -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "streamstack-lag", "namespace": "monitoring"},
        "spec": {
            "groups": [
                {
                    "name": "streamstack-lag",
                    "rules": [
                        {"record": "streamstack:lag_records:sum", "expr": "sum(streamstack_lag_records)"},
                        {
                            "alert": "StreamstackLagGrowing",
                            "expr": "deriv(streamstack:lag_records:sum[10m]) > 0",
                            "for": "15m",
                            "labels": {"severity": "warning"},
                            "annotations": {"summary": "consumer lag keeps growing"},
                        },
                    ],
                }
            ]
        },
    }


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "lag-exporter", "namespace": "monitoring", "labels": {"app": "lag-exporter"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "lag-exporter"}},
            "template": {
                "metadata": {"labels": {"app": "lag-exporter"}},
                "spec": {
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                    "containers": [
                        {
                            "name": "exporter",
                            "image": "streamstack/lag-exporter:0.1.0",
                            "ports": [{"name": "metrics", "containerPort": 9308}],
                            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                            "readinessProbe": {"httpGet": {"path": "/metrics", "port": "metrics"}},
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


def service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "lag-exporter", "namespace": "monitoring", "labels": {"app": "lag-exporter"}},
        "spec": {
            "selector": {"app": "lag-exporter"},
            "ports": [{"name": "metrics", "port": 9308, "targetPort": "metrics"}],
        },
    }


def checkpoint_claim() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "ckpt", "namespace": "jobs", "annotations": {"pulumi.com/skipAwait": "true"}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "standard",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def role_binding() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "spark-driver", "namespace": "jobs"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "spark-driver"},
        "subjects": [{"kind": "ServiceAccount", "name": "spark-driver", "namespace": "jobs"}],
    }


EXAMPLES = {
    "Kafka": kafka,
    "KafkaNodePool": kafka_node_pool,
    "KafkaTopic": kafka_topic,
    "KafkaUser": kafka_user,
    "SparkApplication": spark_application,
    "PodMonitor": pod_monitor,
    "ServiceMonitor": service_monitor,
    "PrometheusRule": prometheus_rule,
    "Deployment": deployment,
    "Service": service,
    "PersistentVolumeClaim": checkpoint_claim,
    "RoleBinding": role_binding,
}


def set_path(document: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = document
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[last] = value


def rename_field(document: dict[str, Any], path: str, new_name: str) -> dict[str, Any]:
    """A copy of `document` with the field at `path` renamed (a misspelling)."""
    changed = copy.deepcopy(document)
    *parents, last = path.split(".")
    node: Any = changed
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[new_name] = node.pop(last)
    return changed


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_a_correct_object_of_each_kind_is_valid(kind: str) -> None:
    manifest = EXAMPLES[kind]()
    assert manifest["kind"] == kind
    assert validate_manifest(manifest) == []


MISSPELLINGS = [
    ("Kafka", "spec.kafka.listeners", "listners", "spec.kafka", "listeners"),
    ("Kafka", "spec.entityOperator", "entityOperater", "spec", "entityOperator"),
    (
        "KafkaNodePool",
        "spec.storage.volumes.0.kraftMetadata",
        "kraftMetaData",
        "spec.storage.volumes[0]",
        None,
    ),
    ("KafkaTopic", "spec.partitions", "partition", "spec", "partitions"),
    ("SparkApplication", "spec.driver.memory", "memroy", "spec.driver", "memory"),
    ("SparkApplication", "spec.restartPolicy", "restartPolicies", "spec", "restartPolicy"),
    ("PodMonitor", "spec.podMetricsEndpoints", "podMetricEndpoints", "spec", "podMetricsEndpoints"),
    (
        "PodMonitor",
        "spec.podMetricsEndpoints.0.interval",
        "intervall",
        "spec.podMetricsEndpoints[0]",
        "interval",
    ),
    (
        "ServiceMonitor",
        "spec.endpoints.0.scrapeTimeout",
        "scrapeTimout",
        "spec.endpoints[0]",
        "scrapeTimeout",
    ),
    ("PrometheusRule", "spec.groups.0.rules.1.for", "fro", "spec.groups[0].rules[1]", None),
    (
        "Deployment",
        "spec.template.spec.containers.0.resources",
        "resource",
        "spec.template.spec.containers[0]",
        None,
    ),
    (
        "Deployment",
        "spec.template.spec.securityContext.runAsNonRoot",
        "runAsNonRot",
        "spec.template.spec.securityContext",
        "runAsNonRoot",
    ),
    ("Service", "spec.ports.0.targetPort", "targetport", "spec.ports[0]", "targetPort"),
    ("PersistentVolumeClaim", "spec.accessModes", "accesModes", "spec", "accessModes"),
]


@pytest.mark.parametrize(("kind", "path", "misspelt", "parent", "suggestion"), MISSPELLINGS)
def test_a_misspelt_field_fails_with_its_path_and_name(
    kind: str, path: str, misspelt: str, parent: str, suggestion: str | None
) -> None:
    manifest = rename_field(EXAMPLES[kind](), path, misspelt)

    errors = validate_manifest(manifest)

    unknown_field_errors = [error for error in errors if repr(misspelt) in error]
    assert len(unknown_field_errors) == 1, errors
    assert unknown_field_errors[0].startswith(f"{kind} {manifest['metadata']['namespace']}/")
    assert f": {parent}: " in unknown_field_errors[0], unknown_field_errors[0]
    if suggestion:
        assert f"did you mean {suggestion!r}" in unknown_field_errors[0]


def test_kubernetes_validate_catches_the_deployment_misspelling_only_in_strict_mode() -> None:
    """The strictness comes from kubernetes-validate's strict schemas: its default mode lets it through."""
    manifest = rename_field(deployment(), "spec.template.spec.containers.0.resources", "resource")

    kubernetes_validate.validate(manifest, "1.33", strict=False)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(manifest, "1.33", strict=True)
    assert validate_manifest(manifest) != []


@pytest.mark.parametrize("kind", ["Kafka", "SparkApplication", "PodMonitor"])
def test_a_misspelt_metadata_field_of_a_custom_resource_fails(kind: str) -> None:
    manifest = rename_field(EXAMPLES[kind](), "metadata.namespace", "namespce")

    errors = validate_manifest(manifest)

    assert len(errors) == 1, errors
    assert ": metadata: unknown field(s) 'namespce' (did you mean 'namespace'?)" in errors[0]


@pytest.mark.parametrize(
    ("kind", "path", "value", "expected"),
    [
        ("KafkaTopic", "spec.partitions", "three", "spec.partitions: 'three' is not of type 'integer'"),
        (
            "Kafka",
            "spec.kafka.listeners.0.type",
            "nodeport-ish",
            "spec.kafka.listeners[0].type: 'nodeport-ish'",
        ),
        ("SparkApplication", "spec.type", "Ruby", "spec.type: 'Ruby' is not one of"),
        ("Deployment", "spec.replicas", "2", "spec.replicas:"),
    ],
)
def test_a_wrong_type_or_value_fails(kind: str, path: str, value: Any, expected: str) -> None:
    manifest = EXAMPLES[kind]()
    set_path(manifest, path, value)

    errors = validate_manifest(manifest)

    assert len(errors) == 1, errors
    assert expected in errors[0]


def test_spark_pod_templates_are_checked_as_kubernetes_pod_templates() -> None:
    """The CRD leaves driver/executor `template` free-form; Spark would drop a misspelt field silently."""
    app = spark_application()
    pod_template = {
        "metadata": {"labels": {"app.kubernetes.io/name": "clickstream-windows"}},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "fsGroup": 185},
            "containers": [{"name": "spark-kubernetes-driver", "securityContext": {"runAsUser": 185}}],
        },
    }
    app["spec"]["driver"]["template"] = pod_template
    app["spec"]["executor"]["template"] = copy.deepcopy(pod_template)
    assert validate_manifest(app) == []

    app["spec"]["executor"]["template"]["spec"]["securityContext"]["runAsNonRot"] = True
    app["spec"]["driver"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUser"] = "spark"

    assert validate_manifest(app) == [
        "SparkApplication jobs/clickstream-windows: spec.driver.template.spec.containers[0].securityContext."
        "runAsUser: 'spark' is not of type 'integer', 'null'",
        "SparkApplication jobs/clickstream-windows: spec.executor.template.spec.securityContext: "
        "unknown field(s) 'runAsNonRot' (did you mean 'runAsNonRoot'?)",
    ]


def test_a_required_field_of_a_custom_resource_is_required() -> None:
    manifest = spark_application()
    del manifest["spec"]["imagePullPolicy"]  # optional in the CRD
    assert validate_manifest(manifest) == []
    del manifest["spec"]["sparkVersion"]  # required
    assert validate_manifest(manifest) == [
        "SparkApplication jobs/clickstream-windows: spec: 'sparkVersion' is a required property"
    ]


@pytest.mark.parametrize("port", [9401, "metrics"])
def test_int_or_string_fields_take_either(port: int | str) -> None:
    monitor = pod_monitor()
    monitor["spec"]["podMetricsEndpoints"][0]["targetPort"] = port
    svc = service()
    svc["spec"]["ports"][0]["targetPort"] = port
    assert validate_manifests([monitor, svc]) == []


def test_int_or_string_fields_take_nothing_else() -> None:
    monitor = pod_monitor()
    monitor["spec"]["podMetricsEndpoints"][0]["targetPort"] = [9401]

    errors = validate_manifest(monitor)

    assert len(errors) == 1, errors
    assert "spec.podMetricsEndpoints[0].targetPort: matches none of the allowed forms" in errors[0]


def test_free_form_maps_of_a_custom_resource_stay_free_form() -> None:
    """Kafka's `config` preserves unknown fields; SparkApplication's sparkConf is a map of strings."""
    manifest = kafka()
    manifest["spec"]["kafka"]["config"]["any.broker.setting"] = "x"
    app = spark_application()
    app["spec"]["sparkConf"]["spark.sql.shuffle.partitions"] = "4"
    assert validate_manifests([manifest, app]) == []
    app["spec"]["sparkConf"]["spark.sql.shuffle.partitions"] = 4
    assert validate_manifest(app) == [
        "SparkApplication jobs/clickstream-windows: spec.sparkConf.spark.sql.shuffle.partitions: "
        "4 is not of type 'string'"
    ]


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        ("example.com/v1", "Widget"),
        ("kafka.strimzi.io/v1beta2", "Kafka"),  # Strimzi 1.2.0 serves only v1
        ("policy/v1beta1", "PodSecurityPolicy"),  # gone since Kubernetes 1.25
    ],
)
def test_a_kind_without_a_schema_is_an_error(api_version: str, kind: str) -> None:
    errors = validate_manifest({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}})

    assert len(errors) == 1
    assert f"no schema for apiVersion {api_version} kind {kind}" in errors[0]


def test_an_object_without_a_name_fails() -> None:
    manifest = service()
    del manifest["metadata"]["name"]
    assert "metadata.name: missing" in " ".join(validate_manifest(manifest))


def test_the_kubernetes_version_chooses_the_schema() -> None:
    """`resizePolicy` on containers exists from Kubernetes 1.27 on."""
    manifest = deployment()
    manifest["spec"]["template"]["spec"]["containers"][0]["resizePolicy"] = [
        {"resourceName": "cpu", "restartPolicy": "NotRequired"}
    ]
    assert validate_manifest(manifest, "1.33") == []
    errors = validate_manifest(manifest, "1.26")
    assert len(errors) == 1 and "'resizePolicy'" in errors[0]


@pytest.mark.parametrize("version", ["1.24", "1.99", "latest"])
def test_a_kubernetes_version_without_schemas_is_a_setup_error(version: str) -> None:
    with pytest.raises(ValidationSetupError, match="Kubernetes"):
        validate_manifest(service(), version)


def test_a_missing_shared_directory_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(k8s_validation.SHARED_DIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(ValidationSetupError, match=f"nowhere not found .*{k8s_validation.SHARED_DIR_ENV}"):
        validate_manifest(kafka())
    with pytest.raises(ValidationSetupError, match="nowhere not found"):
        check_chart_values("spark-operator", {})
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(k8s_validation.SHARED_DIR_ENV, str(tmp_path / "empty"))
    with pytest.raises(ValidationSetupError, match="no CRDs found"):
        validate_manifest(kafka())


def test_the_shared_directory_is_found_beside_the_repository() -> None:
    shared = k8s_validation.shared_dir()
    assert (shared / "crds" / "strimzi-1.2.0" / "040-Crd-kafka.yaml").is_file()
    assert set(k8s_validation.supported_custom_kinds()) >= {
        ("kafka.strimzi.io/v1", kind) for kind in ("Kafka", "KafkaNodePool", "KafkaTopic", "KafkaUser")
    } | {
        ("sparkoperator.k8s.io/v1beta2", "SparkApplication"),
        ("monitoring.coreos.com/v1", "PodMonitor"),
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
    }


# --- Helm values ------------------------------------------------------------------------------------------

GOOD_VALUES: dict[str, dict[str, Any]] = {
    "strimzi-kafka-operator": {
        "watchNamespaces": ["kafka"],
        "resources": {"requests": {"cpu": "100m", "memory": "384Mi"}},
        "podSecurityContext": {"runAsNonRoot": True},  # `{}` upstream: free-form
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "podDisruptionBudget": {"enabled": False, "maxUnavailable": 1},  # `null` upstream
        "dashboards": {"enabled": True, "extraLabels": {"team": "data"}},
    },
    "spark-operator": {
        "controller": {"replicas": 1, "resources": {"requests": {"cpu": "100m"}}, "annotations": {"a": "b"}},
        "webhook": {"enable": False},
        "spark": {"jobNamespaces": ["jobs"], "serviceAccount": {"create": False}},
        "prometheus": {"metrics": {"enable": True}, "podMonitor": {"create": True, "labels": {"x": "y"}}},
    },
    "kube-prometheus-stack": {
        "kubeEtcd": {"enabled": False},
        "kubeControllerManager": {"enabled": False},
        "prometheus": {
            "prometheusSpec": {
                "podMonitorSelectorNilUsesHelmValues": False,
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "retention": "2d",
                "resources": {"requests": {"memory": "400Mi"}},
                "storageSpec": {
                    "volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "5Gi"}}}}
                },
            }
        },
        "grafana": {"sidecar": {"dashboards": {"enabled": True, "searchNamespace": "ALL"}}},
        "kube-state-metrics": {"prometheus": {"monitor": {"enabled": True}}},
        # A sub-chart key the parent does not list, allow-listed in SUBCHART_EXTRA_KEYS.
        "prometheus-node-exporter": {"hostRootFsMount": {"enabled": False}},
    },
}


@pytest.mark.parametrize("chart", sorted(GOOD_VALUES))
def test_values_that_use_the_charts_keys_pass(chart: str) -> None:
    assert check_chart_values(chart, GOOD_VALUES[chart]) == []


@pytest.mark.parametrize(
    ("chart", "path", "misspelt", "expected"),
    [
        (
            "strimzi-kafka-operator",
            "watchNamespaces",
            "watchNamespace",
            "watchNamespace: the chart has no such key",
        ),
        (
            "strimzi-kafka-operator",
            "dashboards.enabled",
            "enable",
            "dashboards.enable: the chart has no such key",
        ),
        ("spark-operator", "webhook.enable", "enabled", "webhook.enabled: the chart has no such key"),
        ("spark-operator", "prometheus.podMonitor.create", "crate", "prometheus.podMonitor.crate:"),
        (
            "kube-prometheus-stack",
            "prometheus.prometheusSpec.podMonitorSelectorNilUsesHelmValues",
            "podMonitorSelectorNilUseHelmValues",
            "prometheus.prometheusSpec.podMonitorSelectorNilUseHelmValues: the chart has no such key "
            "(did you mean 'podMonitorSelectorNilUsesHelmValues'?)",
        ),
        ("kube-prometheus-stack", "kubeEtcd", "kubeETCD", "kubeETCD: the chart has no such key"),
    ],
)
def test_a_key_the_chart_does_not_have_fails(chart: str, path: str, misspelt: str, expected: str) -> None:
    values = rename_field(GOOD_VALUES[chart], path, misspelt)

    errors = check_chart_values(chart, values)

    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{chart} values: {expected}")


def test_keys_below_a_map_of_known_keys_are_checked_all_the_way_down() -> None:
    """prometheusSpec.tsdb lists its keys upstream; prometheusSpec.web is `{}`, open to any key."""
    spec = {"tsdb": {"outOfOrderTimeWindw": "5m"}, "web": {"tlsConfig": {"cert": {}}}}
    errors = check_chart_values("kube-prometheus-stack", {"prometheus": {"prometheusSpec": spec}})
    assert errors == [
        "kube-prometheus-stack values: prometheus.prometheusSpec.tsdb.outOfOrderTimeWindw: the chart has no "
        "such key (did you mean 'outOfOrderTimeWindow'?)"
    ]


def test_lists_are_not_descended() -> None:
    values = {"controller": {"volumes": [{"name": "tmp", "anythingGoes": True}]}}
    assert check_chart_values("spark-operator", values) == []


def test_an_unknown_chart_is_a_setup_error() -> None:
    with pytest.raises(ValidationSetupError, match="no upstream values for chart 'grafana'"):
        check_chart_values("grafana", {})


@pytest.mark.parametrize(
    ("values", "path"),
    [
        # Real keys of the sub-charts that the parent does not list and the allow-list lacks: grafana 12.11.1
        # (grafana-community/helm-charts charts/grafana/values.yaml) sidecar.dashboards.folderAnnotation,
        # prometheus-node-exporter 4.56.1 hostRootFsMount.mountPropagation; then a misspelling and an
        # unknown key.
        (
            {"grafana": {"sidecar": {"dashboards": {"folderAnnotation": "f"}}}},
            "grafana.sidecar.dashboards.folderAnnotation",
        ),
        (
            {"prometheus-node-exporter": {"hostRootFsMount": {"mountPropagation": "None"}}},
            "prometheus-node-exporter.hostRootFsMount.mountPropagation",
        ),
        (
            {"kube-state-metrics": {"prometheus": {"monitor": {"enabld": True}}}},
            "kube-state-metrics.prometheus.monitor.enabld",
        ),
        ({"prometheus-windows-exporter": {"hostNetwork": True}}, "prometheus-windows-exporter.hostNetwork"),
    ],
)
def test_a_sub_chart_key_the_parent_does_not_list_fails_unless_allow_listed(
    values: dict[str, Any], path: str
) -> None:
    errors = check_chart_values("kube-prometheus-stack", values)

    assert len(errors) == 1, errors
    assert errors[0].startswith(
        f"kube-prometheus-stack values: {path}: the parent chart's values.yaml does not list"
    )
    assert "SUBCHART_EXTRA_KEYS" in errors[0]


def test_keys_the_parent_lists_for_a_sub_chart_are_checked_like_any_other() -> None:
    values = {"grafana": {"sidecar": {"dashboards": {"labelValu": "1"}}, "adminUser": "admin"}}
    (error,) = check_chart_values("kube-prometheus-stack", values)
    assert "grafana.sidecar.dashboards.labelValu" in error and "did you mean 'labelValue'" in error
    # Below an allow-listed key, nothing else of the section opens up.
    allowed = {"prometheus-node-exporter": {"hostRootFsMount": {"enabled": False}, "hostNetwork": False}}
    (error,) = check_chart_values("kube-prometheus-stack", allowed)
    assert "prometheus-node-exporter.hostNetwork:" in error


def test_the_sub_chart_allow_list_is_small_and_only_holds_keys_the_parent_lacks() -> None:
    extra = k8s_validation.SUBCHART_EXTRA_KEYS["kube-prometheus-stack"]
    assert 0 < len(extra) <= 5
    defaults = k8s_validation._chart_defaults("kube-prometheus-stack")
    for path in extra:
        section, *keys = path.split(".")
        assert section in k8s_validation.SUBCHART_SECTIONS["kube-prometheus-stack"]
        node: Any = defaults[section]
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        assert node is None, f"{path} is listed by the parent: no allow-list entry needed"

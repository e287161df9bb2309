"""SparkPlatform on its own: the pinned operator with its webhook off, and the driver's least RBAC."""

from __future__ import annotations

from collections.abc import Callable

from infra.components.spark_platform import SparkPlatform, SparkPlatformArgs
from tests.infra.conftest import Stack, build, load_config


def build_platform(mocked: Callable[[str], Stack]) -> Stack:
    recorder = mocked("dev")
    spark = load_config("dev").spark
    build(lambda: SparkPlatform("spark", SparkPlatformArgs(spark=spark, monitoring_namespace="monitoring")))
    return recorder


def test_operator_release_is_pinned_watches_the_jobs_namespace_and_needs_no_webhook(
    mocked: Callable[[str], Stack],
) -> None:
    recorder = build_platform(mocked)
    (release,) = recorder.of_kind("Release")
    assert (release.inputs["chart"], release.inputs["version"]) == ("spark-operator", "2.5.2")
    assert release.inputs["repositoryOpts"]["repo"] == "https://kubeflow.github.io/spark-operator"
    values = release.inputs["values"]
    assert values["image"]["tag"] == "2.5.2"
    assert values["spark"]["jobNamespaces"] == ["streaming"]
    assert values["webhook"]["enable"] is False
    # The chart's own driver account and wide Role are replaced by this component's.
    assert values["spark"]["serviceAccount"]["create"] is False
    assert values["spark"]["rbac"]["create"] is False
    namespaces = {namespace.metadata["name"] for namespace in recorder.of_kind("Namespace")}
    assert namespaces == {"spark-operator", "streaming"}


def test_driver_role_covers_only_pods_services_configmaps_and_claims(mocked: Callable[[str], Stack]) -> None:
    recorder = build_platform(mocked)
    role = recorder.named("Role", "spark-driver")
    assert role.metadata["namespace"] == "streaming"
    rules = {rule["resources"][0]: set(rule["verbs"]) for rule in role.inputs["rules"]}
    assert all(rule["apiGroups"] == [""] and len(rule["resources"]) == 1 for rule in role.inputs["rules"])
    assert set(rules) == {"pods", "services", "configmaps", "persistentvolumeclaims"}
    assert not any("*" in verbs for verbs in rules.values())
    assert {"create", "watch", "delete"} <= rules["pods"]
    assert "create" not in rules["persistentvolumeclaims"] and "delete" not in rules["persistentvolumeclaims"]


def test_role_binding_gives_the_role_to_the_driver_account(mocked: Callable[[str], Stack]) -> None:
    recorder = build_platform(mocked)
    account = recorder.named("ServiceAccount", "spark")
    binding = recorder.named("RoleBinding", "spark-driver")
    assert binding.inputs["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "spark-driver",
    }
    assert binding.inputs["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account.metadata["name"],
            "namespace": account.metadata["namespace"],
        }
    ]

"""What each pinned operator and chart release runs. A version bump edits these tables (and vendors the
release's CRDs with scripts/vendor_crds.py); code reads them as `versions.<TABLE>`, so a test can patch
them."""

from __future__ import annotations

from collections.abc import Collection, Mapping

# Kafka versions each Strimzi release runs, with their KRaft metadata version (Strimzi's kafka-versions.yaml).
STRIMZI_KAFKA_VERSIONS: Mapping[str, Mapping[str, str]] = {
    "1.2.0": {"4.2.0": "4.2-IV1", "4.2.1": "4.2-IV1", "4.3.0": "4.3-IV0", "4.3.1": "4.3-IV0"},
}


STRIMZI_MIN_KUBERNETES: Mapping[str, tuple[int, int]] = {"1.2.0": (1, 30)}


# Spark major versions each spark-operator release submits (2.3+ is built on Spark 4; 2.5.2 on 4.0.4).
SPARK_OPERATOR_SPARK_MAJORS: Mapping[str, tuple[int, ...]] = {"2.5.2": (4,)}


KUBE_PROMETHEUS_STACK_VERSIONS = ("88.5.3",)


def known_versions(chart: str) -> Collection[str]:
    """The releases of `chart` the tables above know (looked up when called, so a patched table counts)."""
    tables: Mapping[str, Collection[str]] = {
        "strimzi-kafka-operator": STRIMZI_KAFKA_VERSIONS,
        "spark-operator": SPARK_OPERATOR_SPARK_MAJORS,
        "kube-prometheus-stack": KUBE_PROMETHEUS_STACK_VERSIONS,
    }
    return tables[chart]

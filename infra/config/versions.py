"""What each pinned operator and chart release runs, and the checks of the stack's version settings against
it. A version bump edits these tables (and vendors the release's CRDs with scripts/vendor_crds.py); code reads
them as `versions.<TABLE>`, so a test can patch them."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from infra.config.base import CRDS_DIR, CRDS_SOURCE_FILE, ConfigError

VERSION_PATTERN = re.compile(r"^([0-9]+)\.([0-9]+)\.([0-9]+)$")
METADATA_VERSION_PATTERN = re.compile(r"^([0-9]+)\.([0-9]+)(-IV[0-9]+)?$")

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


def parse_version(name: str, value: str) -> tuple[int, int, int]:
    match = VERSION_PATTERN.match(value)
    if not match:
        raise ConfigError(f"{name}: {value!r} is not a version such as 4.3.1")
    return int(match[1]), int(match[2]), int(match[3])


def require_pinned_chart(name: str, chart: str, version: str) -> None:
    """A chart version the compatibility tables know, with its CRDs vendored in infra/crds/ (a version bump
    without them fails here)."""
    known = known_versions(chart)
    if version not in known:
        raise ConfigError(
            f"{name}: {chart} {version} is not one this program was written and tested for "
            f"(known: {', '.join(known)}); its compatibility tables in infra/config/versions.py need it first"
        )
    if not (CRDS_DIR / f"{chart}-{version}" / CRDS_SOURCE_FILE).is_file():
        raise ConfigError(
            f"{name}: no CRDs of {chart} {version} in infra/crds/{chart}-{version}/ (Helm does not upgrade "
            "CRDs, so the stack installs them from there): add the version's source to "
            "scripts/vendor_crds.py and run it"
        )

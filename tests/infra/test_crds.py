"""The upstream operators' CRDs: vendored per pinned chart version (scripts/vendor_crds.py), installed by the
program as CustomResourceDefinitions (Server-Side Apply, patchForce, retained on delete) before the releases,
which skip the charts' own crds/ (Helm would never upgrade them)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra import config as stack_config
from infra.components.crds import PATCH_FORCE, SOURCE_ANNOTATION, load_crds
from infra.config import CRDS_DIR, ConfigError, setting
from scripts import vendor_crds
from streamstack.render import validate as k8s_validation
from tests.infra.conftest import Stack, load_config, run_program, stack_sections

# Chart name -> (its setting, the versions infra/config/versions.py's compatibility tables accept).
PINNED = {
    "strimzi-kafka-operator": ("kafka.operatorChartVersion", tuple(stack_config.STRIMZI_KAFKA_VERSIONS)),
    "spark-operator": ("spark.operatorChartVersion", tuple(stack_config.SPARK_OPERATOR_SPARK_MAJORS)),
    "kube-prometheus-stack": ("monitoring.chartVersion", tuple(stack_config.KUBE_PROMETHEUS_STACK_VERSIONS)),
}
BUILT_IN_API_VERSIONS = (
    "v1",
    "apps/v1",
    "networking.k8s.io/v1",
    "rbac.authorization.k8s.io/v1",
    "apiextensions.k8s.io/v1",
)
# Helm release name -> chart.
RELEASE_CHARTS = {
    "strimzi": "strimzi-kafka-operator",
    "spark-operator": "spark-operator",
    "kube-prometheus-stack": "kube-prometheus-stack",
}


def as_floats(value: Any) -> Any:
    """Numbers as the mocks report them (floats), for comparing a recorded spec with a vendored one."""
    if isinstance(value, dict):
        return {key: as_floats(child) for key, child in value.items()}
    if isinstance(value, list):
        return [as_floats(child) for child in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def test_every_pinned_chart_version_has_its_complete_crds_vendored_with_their_sha256() -> None:
    expected_directories = set()
    for chart, (name, versions) in PINNED.items():
        for version in versions:
            expected_directories.add(f"{chart}-{version}")
            assert (chart, version) in vendor_crds.SOURCES, f"{chart} {version}: no source to vendor from"
            crds = load_crds(chart, version, setting(name))  # checks every file against source.json
            source = json.loads((crds.directory / "source.json").read_text())
            assert (source["chart"], source["chartVersion"]) == (chart, version)
            for file_name, digest in source["files"].items():
                assert hashlib.sha256((crds.directory / file_name).read_bytes()).hexdigest() == digest
            assert len(crds.names()) == len(set(crds.names())) == len(source["files"])
    # A version bump replaces the old directory: nothing vendored for a version no longer pinned.
    assert {path.name for path in CRDS_DIR.iterdir()} == expected_directories
    assert set(vendor_crds.SOURCES) == {
        (chart, version) for chart, (_, versions) in PINNED.items() for version in versions
    }


def test_the_vendored_crds_are_the_upstream_files_of_those_versions() -> None:
    """The independent copies in shared/crds (taken from the charts themselves) equal the vendored files."""
    shared = k8s_validation.shared_dir() / "crds"
    strimzi = CRDS_DIR / "strimzi-kafka-operator-1.2.0"
    strimzi_files = sorted((shared / "strimzi-1.2.0").glob("*.yaml"))
    assert len(strimzi_files) >= 7
    for path in strimzi_files:
        assert (strimzi / path.name).read_bytes() == path.read_bytes(), path.name
    spark = CRDS_DIR / "spark-operator-2.5.2"
    for path in (shared / "spark-operator-2.5.2").glob("*.yaml"):
        assert (spark / path.name).read_bytes() == path.read_bytes(), path.name
    # kube-prometheus-stack's charts/crds/crds/crd-<plural>.yaml: a line naming the operator's file, then it.
    prometheus = CRDS_DIR / "kube-prometheus-stack-88.5.3"
    source = json.loads((prometheus / "source.json").read_text())["source"]
    shared_prometheus = sorted((shared / "prometheus-operator-kps-88.5.3").glob("crd-*.yaml"))
    assert len(shared_prometheus) >= 3
    for path in shared_prometheus:
        first_line, rest = path.read_text().split("\n", 1)
        upstream_name = first_line.rsplit("/", 1)[-1]
        assert f"/{source['version']}/{source['directory']}/{upstream_name}" in first_line
        assert (prometheus / upstream_name).read_text() == rest


def test_yaml_1_1_value_tags_load_as_the_strings_the_api_server_reads() -> None:
    crds = load_crds("kube-prometheus-stack", "88.5.3", setting("monitoring.chartVersion"))
    (alertmanager_config,) = [d for d in crds.documents if d["spec"]["names"]["kind"] == "AlertmanagerConfig"]
    text = json.dumps(alertmanager_config)
    assert '["!=", "=", "=~", "!~"]' in text


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_program_installs_the_pinned_crds_before_the_releases_which_skip_theirs(
    mocked: Callable[[str], Stack], stack: str
) -> None:
    config = load_config(stack)
    recorded = run_program(mocked, stack)
    releases = {release.inputs["name"]: release for release in recorded.of_kind("Release")}
    assert {RELEASE_CHARTS[name] for name in releases} == set(PINNED)
    pinned_versions = {
        "strimzi-kafka-operator": config.kafka.operator_chart_version,
        "spark-operator": config.spark.operator_chart_version,
        "kube-prometheus-stack": config.monitoring.chart_version,
    }
    definitions = recorded.of_kind("CustomResourceDefinition")
    installed: set[str] = set()
    for release_name, release in releases.items():
        chart = RELEASE_CHARTS[release_name]
        version = pinned_versions[chart]
        assert release.inputs["version"] == version
        # Helm would install (and never upgrade) the chart's crds/.
        assert release.inputs.get("skipCrds") is True, release_name
        crds = load_crds(chart, version, "test")
        by_name = {d.metadata["name"]: d for d in definitions if d.metadata["name"] in crds.names()}
        assert sorted(by_name) == sorted(crds.names())
        for document in crds.documents:
            definition = by_name[document["metadata"]["name"]]
            # The source version is the chart version the release installs: a bump changes the CRDs.
            assert definition.metadata["annotations"][SOURCE_ANNOTATION] == f"{chart}-{version}"
            assert definition.metadata["annotations"][PATCH_FORCE] == "true"
            assert definition.inputs["spec"] == as_floats(document["spec"])
            # Deleting a CRD deletes every object of its kind.
            assert definition.retain_on_delete
            assert definition.urn in release.dependencies
            assert definition.provider == release.provider
        installed |= set(by_name)
    assert installed == {d.metadata["name"] for d in definitions}

    # Every custom resource the stack creates (the charts' included) has its CRD installed by the stack.
    served = {
        (f"{d.inputs['spec']['group']}/{version['name']}", d.inputs["spec"]["names"]["kind"])
        for d in definitions
        for version in d.inputs["spec"]["versions"]
        if version["served"]
    }
    objects = [r.inputs for r in recorded.resources() if r.custom and "apiVersion" in r.inputs]
    objects += recorded.chart_objects(config.cluster.kubernetes_version).manifests()
    custom = {(o["apiVersion"], o["kind"]) for o in objects if o["apiVersion"] not in BUILT_IN_API_VERSIONS}
    assert {"Kafka", "SparkApplication", "PodMonitor", "ServiceMonitor"} <= {kind for _, kind in custom}
    assert custom <= served, sorted(custom - served)


@pytest.mark.parametrize(
    "case",
    [
        ("STRIMZI_KAFKA_VERSIONS", "strimzi-kafka-operator", "kafka", "operatorChartVersion", "1.3.0"),
        ("SPARK_OPERATOR_SPARK_MAJORS", "spark-operator", "spark", "operatorChartVersion", "2.5.3"),
        ("KUBE_PROMETHEUS_STACK_VERSIONS", "kube-prometheus-stack", "monitoring", "chartVersion", "88.6.0"),
    ],
)
def test_a_chart_bump_without_its_crds_fails_at_preview_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, case: tuple[str, str, str, str, str]
) -> None:
    table, chart, section, key, bumped = case
    # The compatibility tables accept the new version, as a bump would make them...
    known = getattr(stack_config, table)
    if isinstance(known, tuple):
        monkeypatch.setattr(stack_config.versions, table, (*known, bumped))
    else:
        monkeypatch.setattr(stack_config.versions, table, {**known, bumped: next(iter(known.values()))})
    minimum = stack_config.STRIMZI_MIN_KUBERNETES
    bumped_minimum = {**minimum, "1.3.0": minimum["1.2.0"]}
    monkeypatch.setattr(stack_config.versions, "STRIMZI_MIN_KUBERNETES", bumped_minimum)
    sections = stack_sections("dev")
    overrides = {section: {**(sections.get(section) or {}), key: bumped}}
    # ...but its CRDs are not vendored: the config is refused, naming the setting.
    with pytest.raises(ConfigError) as error:
        load_config("dev", **overrides)
    message = str(error.value)
    assert message.startswith(f"streamstack:{section}.{key}: no CRDs of {chart} {bumped}")
    assert "scripts/vendor_crds.py" in message


def test_a_vendored_file_that_differs_from_its_source_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "spark-operator-2.5.2"
    shutil.copytree(CRDS_DIR / "spark-operator-2.5.2", directory)
    assert len(load_crds("spark-operator", "2.5.2", "streamstack:x", root=tmp_path).documents) == 3

    crd = directory / "sparkoperator.k8s.io_sparkconnects.yaml"
    crd.write_text(crd.read_text().replace("served: true", "served: false", 1))
    with pytest.raises(ConfigError, match=r"^streamstack:y: .*sparkconnects.yaml does not match its sha256"):
        load_crds("spark-operator", "2.5.2", "streamstack:y", root=tmp_path)
    crd.unlink()
    with pytest.raises(ConfigError, match=r"^streamstack:z: the CRD files in .* are not those source.json"):
        load_crds("spark-operator", "2.5.2", "streamstack:z", root=tmp_path)
    with pytest.raises(ConfigError, match=r"^streamstack:w: no CRDs of spark-operator 2.6.0"):
        load_crds("spark-operator", "2.6.0", "streamstack:w", root=tmp_path)

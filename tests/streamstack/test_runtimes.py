"""The pinned runtimes, fetched for real: checked against the lock, re-fetched when corrupt, failing fast."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from xml.etree import ElementTree

import pytest

from streamstack import runtimes as runtime_cache
from streamstack.errors import StreamstackError
from streamstack.paths import cache_dir

LOCK = runtime_cache.load_lock()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def fetched() -> runtime_cache.Runtimes:
    """Everything in the default cache, downloaded if missing."""
    return runtime_cache.ensure(log=print)


@pytest.mark.integration
def test_ensure_fills_the_default_cache_with_verified_runtimes_that_run(
    fetched: runtime_cache.Runtimes,
) -> None:
    assert runtime_cache.ensure(log=print) == fetched
    assert runtime_cache.locate() == fetched
    assert len(fetched.kafka_classpath) == sum(a.jar_set == "kafka" for a in LOCK.maven)
    assert len(fetched.spark_kafka_jars) == 4
    assert len(fetched.metrics_reporter_jars) == sum(
        a.jar_set == "kafka-metrics-reporter" for a in LOCK.maven
    )
    # The Debezium plugin's jars and the Connect worker's JMX exporter agent are the CDC runtimes'
    # (tests/cdc/test_cdc_runtimes.py, tests/cdc/test_source_lag.py).
    cdc_sets = (runtime_cache.DEBEZIUM_SET, runtime_cache.CONNECT_JMX_EXPORTER_SET)
    for artifact in (a for a in LOCK.maven if a.jar_set not in cdc_sets):
        jar = runtime_cache.jar_path(cache_dir(), artifact)
        assert jar in fetched.kafka_classpath + fetched.spark_kafka_jars + fetched.metrics_reporter_jars
        assert sha256_of(jar) == artifact.sha256, artifact.coordinates

    classpath = os.pathsep.join(str(jar) for jar in fetched.kafka_classpath)
    kafka = subprocess.run(
        [str(fetched.java), "-cp", classpath, "kafka.Kafka", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert kafka.returncode == 0, kafka.stderr
    assert kafka.stdout.strip().splitlines()[0] == "4.3.1"

    promtool = subprocess.run(
        [str(fetched.promtool), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert promtool.returncode == 0, promtool.stderr
    assert "version 2.42.0" in promtool.stdout + promtool.stderr

    for binary in (fetched.alertmanager, fetched.amtool):
        version = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
        assert version.returncode == 0, version.stderr
        assert f"version {LOCK.alertmanager.upstream_version}" in version.stdout + version.stderr, binary
    assert LOCK.alertmanager.upstream_version.startswith("0.25.")


def test_a_corrupted_jar_is_detected_and_downloaded_again(
    fetched: runtime_cache.Runtimes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smallest = min(
        LOCK.maven, key=lambda artifact: runtime_cache.jar_path(cache_dir(), artifact).stat().st_size
    )
    lock = dataclasses.replace(LOCK, maven=(smallest,))
    monkeypatch.setenv(runtime_cache.PROMETHEUS_DIR_ENV, str(fetched.prometheus.parent))
    monkeypatch.setenv(runtime_cache.ALERTMANAGER_DIR_ENV, str(fetched.alertmanager.parent))
    jar = runtime_cache.jar_path(tmp_path, smallest)
    jar.parent.mkdir(parents=True)
    shutil.copy2(runtime_cache.jar_path(cache_dir(), smallest), jar)
    found = runtime_cache.locate(tmp_path, lock=lock)
    assert found.kafka_classpath + found.spark_kafka_jars + found.metrics_reporter_jars == (jar,)

    corrupted = bytearray(jar.read_bytes())
    corrupted[len(corrupted) // 2] ^= 0xFF
    jar.write_bytes(corrupted)
    with pytest.raises(StreamstackError, match=r"missing.*make setup"):
        runtime_cache.locate(tmp_path, lock=lock)

    messages: list[str] = []
    repaired = runtime_cache.ensure(tmp_path, log=messages.append, lock=lock)
    assert repaired == found
    assert sha256_of(jar) == smallest.sha256
    assert any(jar.name in message and "again" in message for message in messages), messages
    assert runtime_cache.locate(tmp_path, lock=lock) == found


def test_an_unreachable_repository_fails_fast_naming_the_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    monkeypatch.setenv(runtime_cache.MAVEN_REPO_ENV, f"http://127.0.0.1:{closed_port}")
    cache = tmp_path / "cache"

    started = time.monotonic()
    with pytest.raises(StreamstackError) as raised:
        runtime_cache.ensure(cache, log=print)
    assert time.monotonic() - started < 10

    message = str(raised.value)
    assert "\n" not in message
    assert "STREAMSTACK_MAVEN_REPO" in message
    assert any(artifact.coordinates in message for artifact in LOCK.maven), message
    assert not [path for path in cache.rglob("*") if path.is_file()], "no partial downloads left behind"


def test_check_reports_an_empty_cache_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STREAMSTACK_CACHE", str(tmp_path))
    assert runtime_cache.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{len(LOCK.maven)} of {len(LOCK.maven)} jars" in err
    assert "prometheus 2.42.0" in err
    assert "prometheus-alertmanager 0.25.0" in err
    assert "run `make setup` (or `streamstack setup`)" in err


# --- the connector set: exactly what spark-sql-kafka needs at run time and pyspark does not ship ----------

POM_NAMESPACE = {"m": "http://maven.apache.org/POM/4.0.0"}


def spark_kafka_set() -> dict[tuple[str, str], str]:
    return {(a.group, a.artifact): a.version for a in LOCK.maven if a.jar_set == "spark-kafka"}


def test_spark_artifacts_of_the_connector_set_are_one_release() -> None:
    spark = {f"{artifact}:{version}" for (group, artifact), version in spark_kafka_set().items()
             if group == "org.apache.spark"}  # fmt: skip
    assert len(spark) == 2, spark
    assert len({coordinates.rsplit(":", 1)[1] for coordinates in spark}) == 1, spark


def declared_runtime_dependencies(
    group: str, artifact: str, version: str
) -> list[tuple[str, str, str, frozenset[tuple[str, str]]]]:
    """(group, artifact, version, exclusions) of the compile and runtime dependencies that the POM published
    on Maven Central declares (Spark's published POMs carry resolved versions)."""
    repository = os.environ.get(runtime_cache.MAVEN_REPO_ENV, runtime_cache.DEFAULT_MAVEN_REPO).rstrip("/")
    url = f"{repository}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.pom"
    with urllib.request.urlopen(url, timeout=runtime_cache.NETWORK_TIMEOUT_S) as response:
        project = ElementTree.fromstring(response.read())
    declared = []
    for dependency in project.iterfind("m:dependencies/m:dependency", POM_NAMESPACE):
        field = {child.tag.split("}")[1]: (child.text or "").strip() for child in dependency}
        if field.get("scope", "compile") not in ("compile", "runtime") or field.get("optional") == "true":
            continue
        if field.get("type", "jar") != "jar" or "classifier" in field:
            continue
        assert "${" not in field["version"], f"{url}: unresolved version of {field['artifactId']}"
        exclusions = frozenset(
            (
                exclusion.findtext("m:groupId", "", POM_NAMESPACE),
                exclusion.findtext("m:artifactId", "", POM_NAMESPACE),
            )
            for exclusion in dependency.iterfind("m:exclusions/m:exclusion", POM_NAMESPACE)
        )
        declared.append((field["groupId"], field["artifactId"], field["version"], exclusions))
    return declared


@pytest.mark.integration
def test_connector_set_is_what_the_connector_declares_minus_what_pyspark_ships() -> None:
    """Walk spark-sql-kafka's POM (and the POMs of what it pulls in): every compile/runtime dependency that
    pyspark does not bundle must be locked at exactly the declared version, and nothing else is locked."""
    locked = spark_kafka_set()
    (connector,) = [key for key in locked if key[1].startswith("spark-sql-kafka-0-10_")]
    jars_dir = runtime_cache.pyspark_jars_dir()
    declared_versions: dict[tuple[str, str], set[str]] = defaultdict(set)
    declared_versions[connector].add(locked[connector])
    pending = [(connector, locked[connector], frozenset[tuple[str, str]]())]
    visited = set()
    while pending:
        (group, artifact), version, excluded = pending.pop()
        if (group, artifact, version) in visited:
            continue
        visited.add((group, artifact, version))
        for dep_group, dep_artifact, dep_version, exclusions in declared_runtime_dependencies(
            group, artifact, version
        ):
            key = (dep_group, dep_artifact)
            if (
                key in excluded
                or (dep_group, "*") in excluded
                or runtime_cache.pyspark_bundles(dep_artifact, jars_dir)
            ):
                continue
            declared_versions[key].add(dep_version)
            pending.append((key, dep_version, excluded | exclusions))
    needed = {key: ", ".join(sorted(versions)) for key, versions in declared_versions.items()}
    assert needed == locked

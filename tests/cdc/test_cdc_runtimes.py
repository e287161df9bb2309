"""The CDC runtimes from the lock: PostgreSQL unpacked from the pinned Debian packages, and the Debezium
plugin's jars, each checked against its sha256."""

from __future__ import annotations

import subprocess

import pytest

from streamstack import runtimes as runtime_cache
from streamstack.paths import cache_dir
from streamstack.runtimes import sha256_of
from streamstack.runtimes.cdc import locate_cdc, postgresql_environment
from streamstack.runtimes.lock import CdcRuntimes

pytestmark = [pytest.mark.integration]


def test_the_locked_postgresql_and_debezium_jars_are_in_the_cache_and_run(cdc_runtimes: CdcRuntimes) -> None:
    lock = runtime_cache.load_lock()
    assert locate_cdc() == cdc_runtimes
    debezium = [a for a in lock.maven if a.jar_set == runtime_cache.DEBEZIUM_SET]
    assert {a.artifact for a in debezium} >= {"debezium-connector-postgres", "postgresql"}
    assert {a.version for a in debezium if a.group == "io.debezium"} == {"3.6.1.Final"}
    # Nothing Kafka Connect already has (its classpath is the "kafka" set) is in the plugin.
    kafka = {(a.group, a.artifact) for a in lock.maven if a.jar_set == "kafka"}
    assert not {(a.group, a.artifact) for a in debezium} & kafka
    assert len(cdc_runtimes.debezium_jars) == len(debezium)
    for artifact, jar in zip(debezium, cdc_runtimes.debezium_jars, strict=True):
        assert jar == runtime_cache.jar_path(cache_dir(), artifact)
        assert sha256_of(jar) == artifact.sha256, artifact.coordinates

    assert [package.name for package in lock.postgresql] == ["postgresql-15", "libpq5"]
    [version] = {package.version for package in lock.postgresql}
    for program in ("postgres", "initdb", "pg_ctl"):
        result = subprocess.run(
            [str(cdc_runtimes.postgresql_bin / program), "--version"],
            env=postgresql_environment(cdc_runtimes),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert f"(PostgreSQL) {version.split('-')[0]} (Debian {version})" in result.stdout

"""The pinned runtimes, fetched for real: checked against the lock, re-fetched when corrupt, failing fast."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

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
    for artifact in LOCK.maven:
        jar = runtime_cache.jar_path(cache_dir(), artifact)
        assert jar in fetched.kafka_classpath + fetched.spark_kafka_jars
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


def test_a_corrupted_jar_is_detected_and_downloaded_again(
    fetched: runtime_cache.Runtimes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smallest = min(
        LOCK.maven, key=lambda artifact: runtime_cache.jar_path(cache_dir(), artifact).stat().st_size
    )
    lock = dataclasses.replace(LOCK, maven=(smallest,))
    monkeypatch.setenv(runtime_cache.PROMETHEUS_DIR_ENV, str(fetched.prometheus.parent))
    jar = runtime_cache.jar_path(tmp_path, smallest)
    jar.parent.mkdir(parents=True)
    shutil.copy2(runtime_cache.jar_path(cache_dir(), smallest), jar)
    found = runtime_cache.locate(tmp_path, lock=lock)
    assert found.kafka_classpath + found.spark_kafka_jars == (jar,)

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
    assert "run `make setup` (or `streamstack setup`)" in err

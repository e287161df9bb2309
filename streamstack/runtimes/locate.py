"""Find what is already in the cache (or given by environment), checked against the lock; never downloads."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from streamstack.errors import StreamstackError
from streamstack.paths import cache_dir
from streamstack.runtimes.lock import (
    ALERTMANAGER,
    APT_TIMEOUT_S,
    MIN_JAVA_VERSION,
    PROMETHEUS,
    PROMETHEUS_READY_MARKER,
    SETUP_HINT,
    VERIFIED_STAMP_SUFFIX,
    DebPackage,
    DebRuntime,
    Lock,
    Runtimes,
    jar_path,
    load_lock,
    prometheus_home,
)


def find_java() -> Path:
    """The java executable from JAVA_HOME, else from PATH; it must be Java 17 or newer."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise StreamstackError(
                f"Java {MIN_JAVA_VERSION} or newer is required: JAVA_HOME={java_home} has no bin/java; "
                "point JAVA_HOME at a JDK or unset it to use `java` on PATH"
            )
    else:
        found = shutil.which("java")
        if found is None:
            raise StreamstackError(
                f"Java {MIN_JAVA_VERSION} or newer is required: no `java` on PATH and JAVA_HOME unset"
            )
        # Resolved, so that java.parent.parent is the JDK home (e.g. for JAVA_HOME of child processes).
        java = Path(found).resolve()
    version = _java_major_version(java)
    if version < MIN_JAVA_VERSION:
        raise StreamstackError(
            f"Java {MIN_JAVA_VERSION} or newer is required: {java} is Java {version}; "
            "set JAVA_HOME to a newer JDK"
        )
    return java


def _java_major_version(java: Path) -> int:
    result = _completed([str(java), "-version"], f"`{java} -version`", timeout=60)
    # `java -version` prints e.g. 'openjdk version "17.0.15" 2025-04-15' (or "1.8.0_392" before Java 9).
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if result.returncode != 0 or match is None:
        first_line = (result.stderr or result.stdout).strip().splitlines()[:1]
        raise StreamstackError(f"cannot tell the Java version from `{java} -version`: {first_line}")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + VERIFIED_STAMP_SUFFIX)


def _write_verified_stamp(path: Path, sha256: str) -> None:
    stat = path.stat()
    with contextlib.suppress(OSError):  # a read-only cache only costs re-hashing next time
        _stamp_path(path).write_text(f"{sha256} {stat.st_size} {stat.st_mtime_ns}")


def _has_sha256(path: Path, expected: str) -> bool:
    """Whether path exists with the expected sha256.

    A stamp next to the file remembers a match for the file's size and mtime, so that checking a warm
    cache does not re-hash every jar.
    """
    try:
        stat = path.stat()
    except FileNotFoundError:
        return False
    stamp = _stamp_path(path)
    try:
        if stamp.read_text() == f"{expected} {stat.st_size} {stat.st_mtime_ns}":
            return True
    except OSError:
        pass
    if sha256_of(path) != expected:
        stamp.unlink(missing_ok=True)
        return False
    _write_verified_stamp(path, expected)
    return True


def _prometheus_override(runtime: DebRuntime = PROMETHEUS) -> tuple[Path, Path] | None:
    """The runtime's two binaries from its override directory (e.g. STREAMSTACK_PROMETHEUS_DIR), if set."""
    directory = os.environ.get(runtime.override_env)
    if not directory:
        return None
    first, second = (Path(directory) / name for name in runtime.binaries)
    for binary in (first, second):
        if not os.access(binary, os.X_OK):
            raise StreamstackError(
                f"{runtime.override_env}={directory} has no executable `{binary.name}`; point it at a "
                f"directory holding the {' and '.join(runtime.binaries)} binaries, or unset it"
            )
    return first, second


def _unpacked_prometheus(
    cache: Path, package: DebPackage, runtime: DebRuntime = PROMETHEUS
) -> tuple[Path, Path] | None:
    home = prometheus_home(cache, package)
    first, second = (home / "usr" / "bin" / name for name in runtime.binaries)
    binaries = (first, second)
    try:
        ready = (home / PROMETHEUS_READY_MARKER).read_text() == package.sha256
    except OSError:
        return None
    return binaries if ready and all(os.access(binary, os.X_OK) for binary in binaries) else None


def _runtimes(
    java: Path, cache: Path, lock: Lock, prometheus: tuple[Path, Path], alertmanager: tuple[Path, Path]
) -> Runtimes:
    def jars(jar_set: str) -> tuple[Path, ...]:
        return tuple(jar_path(cache, artifact) for artifact in lock.maven if artifact.jar_set == jar_set)

    return Runtimes(
        java=java,
        kafka_classpath=jars("kafka"),
        spark_kafka_jars=jars("spark-kafka"),
        metrics_reporter_jars=jars("kafka-metrics-reporter"),
        prometheus=prometheus[0],
        promtool=prometheus[1],
        alertmanager=alertmanager[0],
        amtool=alertmanager[1],
    )


def locate(cache: Path | None = None, lock: Lock | None = None) -> Runtimes:
    """The runtimes already in the cache; downloads nothing."""
    cache = cache_dir() if cache is None else cache
    lock = load_lock() if lock is None else lock
    java = find_java()
    missing_jars = [a for a in lock.maven if not _has_sha256(jar_path(cache, a), a.sha256)]
    prometheus = _prometheus_override() or _unpacked_prometheus(cache, lock.prometheus)
    alertmanager = _prometheus_override(ALERTMANAGER) or _unpacked_prometheus(
        cache, lock.alertmanager, ALERTMANAGER
    )
    if not missing_jars and prometheus is not None and alertmanager is not None:
        return _runtimes(java, cache, lock, prometheus, alertmanager)
    missing = []
    if missing_jars:
        examples = ", ".join(a.coordinates for a in missing_jars[:3])
        more = f" and {len(missing_jars) - 3} more" if len(missing_jars) > 3 else ""
        missing.append(f"{len(missing_jars)} of {len(lock.maven)} jars ({examples}{more})")
    if prometheus is None:
        missing.append(f"prometheus {lock.prometheus.version}")
    if alertmanager is None:
        missing.append(f"{lock.alertmanager.name} {lock.alertmanager.version}")
    raise StreamstackError(f"runtimes missing from {cache}: {' and '.join(missing)}; {SETUP_HINT}")


def _completed(
    command: list[str], what: str, cwd: Path | None = None, timeout: float = APT_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """The finished command, whatever its exit code; StreamstackError if it cannot run or times out."""
    try:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise StreamstackError(f"{what} failed: {error}") from error


def _run(command: list[str], what: str, cwd: Path | None = None) -> str:
    result = _completed(command, what, cwd)
    if result.returncode != 0:
        raise StreamstackError(f"{what} failed: {_last_line(result.stderr or result.stdout)}")
    return result.stdout


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E:")]
    return (errors or lines or ["no output"])[-1]

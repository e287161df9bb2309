"""Fetch what is missing: jars from Maven Central and the Debian packages, each checked against its sha256."""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from streamstack.errors import StreamstackError
from streamstack.paths import cache_dir
from streamstack.runtimes.locate import (
    _completed,
    _has_sha256,
    _last_line,
    _prometheus_override,
    _run,
    _runtimes,
    _unpacked_prometheus,
    _write_verified_stamp,
    find_java,
    sha256_of,
)
from streamstack.runtimes.lock import (
    ALERTMANAGER,
    APT_OPTIONS,
    DEFAULT_MAVEN_REPO,
    MAVEN_REPO_ENV,
    NETWORK_TIMEOUT_S,
    PARALLEL_DOWNLOADS,
    PROMETHEUS,
    PROMETHEUS_READY_MARKER,
    DebPackage,
    DebRuntime,
    Lock,
    MavenArtifact,
    Runtimes,
    jar_path,
    load_lock,
    prometheus_home,
)


def ensure(
    cache: Path | None = None, log: Callable[[str], None] = print, lock: Lock | None = None
) -> Runtimes:
    """The runtimes in the cache, after downloading and verifying whatever is missing or corrupt."""
    cache = cache_dir() if cache is None else cache
    lock = load_lock() if lock is None else lock
    java = find_java()
    ensure_jars(cache, lock.maven, log)
    prometheus = _prometheus_override()
    if prometheus is None:
        prometheus = _ensure_unpacked_prometheus(cache, lock.prometheus, log)
    _check_prometheus_runs(prometheus[0], expected_version=None)
    alertmanager = _prometheus_override(ALERTMANAGER)
    if alertmanager is None:
        alertmanager = _ensure_unpacked_prometheus(cache, lock.alertmanager, log, ALERTMANAGER)
    _check_prometheus_runs(alertmanager[0], expected_version=None)
    return _runtimes(java, cache, lock, prometheus, alertmanager)


def ensure_jars(cache: Path, artifacts: Sequence[MavenArtifact], log: Callable[[str], None]) -> None:
    """Download into the cache every artifact whose jar is missing or does not match its sha256."""
    stale = []
    for artifact in artifacts:
        path = jar_path(cache, artifact)
        if not _has_sha256(path, artifact.sha256):
            if path.exists():
                log(f"{path.name} does not match its sha256 in the lock; downloading it again")
            stale.append(artifact)
    if not stale:
        return
    repository = os.environ.get(MAVEN_REPO_ENV, DEFAULT_MAVEN_REPO).rstrip("/")
    log(f"downloading {_count(stale, 'jar')} from {repository} into {cache / 'maven'}")
    started = time.monotonic()
    with ThreadPoolExecutor(PARALLEL_DOWNLOADS, thread_name_prefix="streamstack-download") as pool:
        futures = [
            pool.submit(_download_jar, repository, artifact, jar_path(cache, artifact)) for artifact in stale
        ]
        for future in as_completed(futures):
            if future.exception() is not None:
                pool.shutdown(wait=False, cancel_futures=True)
                future.result()
    log(f"downloaded {_count(stale, 'jar')} in {time.monotonic() - started:.1f} s")


def _count(items: Sequence[object], noun: str) -> str:
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'}"


def _download_jar(repository: str, artifact: MavenArtifact, target: Path) -> None:
    url = f"{repository}/{artifact.repository_path}"
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, partial_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    partial = Path(partial_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(descriptor, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=NETWORK_TIMEOUT_S) as response:
                    for block in iter(lambda: response.read(1 << 16), b""):
                        digest.update(block)
                        out.write(block)
            except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as error:
                raise StreamstackError(
                    f"cannot download {artifact.coordinates} from {url} ({_describe(error)}); "
                    f"put the jar at {target}, or set {MAVEN_REPO_ENV} to a reachable Maven mirror"
                ) from error
        actual = digest.hexdigest()
        if actual != artifact.sha256:
            raise StreamstackError(
                f"sha256 mismatch for {artifact.coordinates} downloaded from {url}: "
                f"expected {artifact.sha256}, got {actual}"
            )
        partial.replace(target)
        _write_verified_stamp(target, artifact.sha256)
    finally:
        partial.unlink(missing_ok=True)


def _describe(error: Exception) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code}"
    if isinstance(error, urllib.error.URLError):
        return str(error.reason)
    return str(error) or type(error).__name__


def _ensure_unpacked_prometheus(
    cache: Path, package: DebPackage, log: Callable[[str], None], runtime: DebRuntime = PROMETHEUS
) -> tuple[Path, Path]:
    unpacked = _unpacked_prometheus(cache, package, runtime)
    if unpacked is not None:
        return unpacked
    deb = cache / "debs" / package.file_name
    if not _has_sha256(deb, package.sha256):
        _download_deb(package, deb, log, runtime)
    home = prometheus_home(cache, package)
    log(f"unpacking {deb.name} into {home}")
    if shutil.which("dpkg-deb") is None:
        raise StreamstackError(
            f"dpkg-deb not found to unpack {deb}; {_prometheus_dir_hint(package, runtime)}"
        )
    staging = Path(tempfile.mkdtemp(dir=cache, prefix=f".{home.name}."))
    try:
        _run(["dpkg-deb", "-x", str(deb), str(staging)], f"unpacking {deb}")
        _check_prometheus_runs(staging / "usr" / "bin" / runtime.binaries[0], package.upstream_version)
        (staging / PROMETHEUS_READY_MARKER).write_text(package.sha256)
        shutil.rmtree(home, ignore_errors=True)  # a stale or half-written earlier unpack
        try:
            staging.rename(home)
        except OSError:
            if _unpacked_prometheus(cache, package, runtime) is None:
                raise
            # else a concurrent `ensure` unpacked it first
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    unpacked = _unpacked_prometheus(cache, package, runtime)
    if unpacked is None:
        first, second = runtime.binaries
        raise StreamstackError(f"{home} has no usr/bin/{first} and usr/bin/{second} after unpacking {deb}")
    return unpacked


def _prometheus_dir_hint(package: DebPackage, runtime: DebRuntime = PROMETHEUS) -> str:
    return (
        f"set {runtime.override_env} to a directory holding {' and '.join(runtime.binaries)} "
        f"{package.upstream_version} binaries"
    )


def _download_deb(
    package: DebPackage, target: Path, log: Callable[[str], None], runtime: DebRuntime = PROMETHEUS
) -> None:
    """`apt-get download` the pinned .deb (no system-wide install: that would start services)."""
    pinned = f"{package.name}:{package.architecture}={package.version}"
    if shutil.which("apt-get") is None:
        raise StreamstackError(
            f"apt-get not found to download {pinned}; {_prometheus_dir_hint(package, runtime)}"
        )
    native = _run(["dpkg", "--print-architecture"], "asking dpkg for the architecture").strip()
    if native != package.architecture:
        raise StreamstackError(
            f"{package.name} is locked for {package.architecture}, this machine is {native}; "
            f"{_prometheus_dir_hint(package, runtime)}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(dir=target.parent, prefix=".apt-"))
    try:
        log(f"downloading {pinned} with apt-get")
        download = ["apt-get", *APT_OPTIONS, "download", pinned]
        result = _completed(download, f"`apt-get download {pinned}`", workdir)
        if result.returncode != 0:
            # Usually missing or outdated package lists; `apt-get update` fixes that but needs root.
            if os.geteuid() != 0:
                raise StreamstackError(
                    f"`apt-get download {pinned}` failed ({_last_line(result.stderr)}); the package lists "
                    "may be missing or outdated: run `sudo apt-get update` (streamstack is not root), "
                    f"or {_prometheus_dir_hint(package, runtime)}"
                )
            log(f"apt-get download failed ({_last_line(result.stderr)}); running apt-get update")
            try:
                _run(["apt-get", *APT_OPTIONS, "update"], f"apt-get update (to download {pinned})")
                _run(download, f"`apt-get download {pinned}` after apt-get update", cwd=workdir)
            except StreamstackError as error:
                raise StreamstackError(f"{error}; {_prometheus_dir_hint(package, runtime)}") from error
        downloaded = sorted(workdir.glob("*.deb"))
        if len(downloaded) != 1:
            raise StreamstackError(
                f"`apt-get download {pinned}` left {len(downloaded)} .deb files in {workdir}"
            )
        actual = sha256_of(downloaded[0])
        if actual != package.sha256:
            raise StreamstackError(
                f"sha256 mismatch for {package.file_name}: expected {package.sha256}, got {actual}"
            )
        downloaded[0].replace(target)
        _write_verified_stamp(target, package.sha256)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _check_prometheus_runs(prometheus: Path, expected_version: str | None) -> None:
    """`prometheus --version` succeeds (and names expected_version, if given)."""
    result = _completed([str(prometheus), "--version"], f"`{prometheus} --version`", timeout=60)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise StreamstackError(f"`{prometheus} --version` failed: {_last_line(output)}")
    if expected_version is not None and f"version {expected_version}" not in output:
        raise StreamstackError(f"`{prometheus} --version` is not {expected_version}: {_last_line(output)}")

"""Third-party runtimes (Kafka and Spark-Kafka jars, Prometheus) and tools (helm, actionlint, checkov) in the
cache: pinned, checked, re-used.

The versions and sha256 come from runtimes.lock.json, written by scripts/lock_runtimes.py.

    python -m streamstack.runtimes           # fetch whatever is missing
    python -m streamstack.runtimes --check   # only report whether everything is there
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from streamstack.errors import StreamstackError
from streamstack.paths import cache_dir

LOCK_PATH = Path(__file__).with_name("runtimes.lock.json")
MAVEN_REPO_ENV = "STREAMSTACK_MAVEN_REPO"
DEFAULT_MAVEN_REPO = "https://repo1.maven.org/maven2"
PROMETHEUS_DIR_ENV = "STREAMSTACK_PROMETHEUS_DIR"
MIN_JAVA_VERSION = 17
SETUP_HINT = "run `make setup` (or `streamstack setup`)"
KUBERNETES_TOOLS_HINT = "run `make setup-all` (or `streamstack setup --kubernetes-tools`)"

NETWORK_TIMEOUT_S = 15
PARALLEL_DOWNLOADS = 8
APT_TIMEOUT_S = 600
APT_OPTIONS = ["-o", f"Acquire::http::Timeout={NETWORK_TIMEOUT_S}", "-o", "Acquire::Retries=0"]
VERIFIED_STAMP_SUFFIX = ".sha256-ok"
PROMETHEUS_READY_MARKER = ".streamstack-ready"


@dataclass(frozen=True)
class MavenArtifact:
    """One pinned jar; jar_set is "kafka" or "spark-kafka"."""

    jar_set: str
    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def repository_path(self) -> str:
        """Path of the jar in a Maven repository, and in <cache>/maven."""
        group_path = self.group.replace(".", "/")
        return f"{group_path}/{self.artifact}/{self.version}/{self.artifact}-{self.version}.jar"


@dataclass(frozen=True)
class DebPackage:
    """The pinned Debian package Prometheus is unpacked from."""

    name: str
    version: str
    architecture: str
    sha256: str

    @property
    def file_name(self) -> str:
        return f"{self.name}_{self.version}_{self.architecture}.deb"

    @property
    def upstream_version(self) -> str:
        """'2.42.0' for '2.42.0+ds-5+deb12u1'."""
        return re.split(r"[+~-]", self.version.split(":")[-1])[0]


@dataclass(frozen=True)
class Lock:
    """The contents of runtimes.lock.json; tests may pass a subset of it."""

    maven: tuple[MavenArtifact, ...]
    prometheus: DebPackage


@dataclass(frozen=True)
class Runtimes:
    """Paths of the runtimes, all present and verified."""

    java: Path
    kafka_classpath: tuple[Path, ...]
    spark_kafka_jars: tuple[Path, ...]
    prometheus: Path
    promtool: Path


def load_lock(path: Path = LOCK_PATH) -> Lock:
    data = json.loads(path.read_text())
    return Lock(
        maven=tuple(
            MavenArtifact(
                jar_set=entry["set"],
                group=entry["group"],
                artifact=entry["artifact"],
                version=entry["version"],
                sha256=entry["sha256"],
            )
            for entry in data["maven"]
        ),
        prometheus=DebPackage(**data["prometheus"]),
    )


def jar_path(cache: Path, artifact: MavenArtifact) -> Path:
    return cache / "maven" / artifact.repository_path


def prometheus_home(cache: Path, package: DebPackage) -> Path:
    """Where the .deb is unpacked; the binaries are in usr/bin below it."""
    return cache / f"prometheus-{package.version}"


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


def _prometheus_override() -> tuple[Path, Path] | None:
    """(prometheus, promtool) from STREAMSTACK_PROMETHEUS_DIR, if set."""
    directory = os.environ.get(PROMETHEUS_DIR_ENV)
    if not directory:
        return None
    binaries = (Path(directory) / "prometheus", Path(directory) / "promtool")
    for binary in binaries:
        if not os.access(binary, os.X_OK):
            raise StreamstackError(
                f"{PROMETHEUS_DIR_ENV}={directory} has no executable `{binary.name}`; "
                "point it at a directory holding the prometheus and promtool binaries, or unset it"
            )
    return binaries


def _unpacked_prometheus(cache: Path, package: DebPackage) -> tuple[Path, Path] | None:
    home = prometheus_home(cache, package)
    binaries = (home / "usr" / "bin" / "prometheus", home / "usr" / "bin" / "promtool")
    try:
        ready = (home / PROMETHEUS_READY_MARKER).read_text() == package.sha256
    except OSError:
        return None
    return binaries if ready and all(os.access(binary, os.X_OK) for binary in binaries) else None


def _runtimes(java: Path, cache: Path, lock: Lock, prometheus: tuple[Path, Path]) -> Runtimes:
    def jars(jar_set: str) -> tuple[Path, ...]:
        return tuple(jar_path(cache, artifact) for artifact in lock.maven if artifact.jar_set == jar_set)

    return Runtimes(
        java=java,
        kafka_classpath=jars("kafka"),
        spark_kafka_jars=jars("spark-kafka"),
        prometheus=prometheus[0],
        promtool=prometheus[1],
    )


def locate(cache: Path | None = None, lock: Lock | None = None) -> Runtimes:
    """The runtimes already in the cache; downloads nothing."""
    cache = cache_dir() if cache is None else cache
    lock = load_lock() if lock is None else lock
    java = find_java()
    missing_jars = [a for a in lock.maven if not _has_sha256(jar_path(cache, a), a.sha256)]
    prometheus = _prometheus_override() or _unpacked_prometheus(cache, lock.prometheus)
    if not missing_jars and prometheus is not None:
        return _runtimes(java, cache, lock, prometheus)
    missing = []
    if missing_jars:
        examples = ", ".join(a.coordinates for a in missing_jars[:3])
        more = f" and {len(missing_jars) - 3} more" if len(missing_jars) > 3 else ""
        missing.append(f"{len(missing_jars)} of {len(lock.maven)} jars ({examples}{more})")
    if prometheus is None:
        missing.append(f"prometheus {lock.prometheus.version}")
    raise StreamstackError(f"runtimes missing from {cache}: {' and '.join(missing)}; {SETUP_HINT}")


def ensure(
    cache: Path | None = None, log: Callable[[str], None] = print, lock: Lock | None = None
) -> Runtimes:
    """The runtimes in the cache, after downloading and verifying whatever is missing or corrupt."""
    cache = cache_dir() if cache is None else cache
    lock = load_lock() if lock is None else lock
    java = find_java()
    _ensure_jars(cache, lock.maven, log)
    prometheus = _prometheus_override()
    if prometheus is None:
        prometheus = _ensure_unpacked_prometheus(cache, lock.prometheus, log)
    _check_prometheus_runs(prometheus[0], expected_version=None)
    return _runtimes(java, cache, lock, prometheus)


def _ensure_jars(cache: Path, artifacts: Sequence[MavenArtifact], log: Callable[[str], None]) -> None:
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
    cache: Path, package: DebPackage, log: Callable[[str], None]
) -> tuple[Path, Path]:
    unpacked = _unpacked_prometheus(cache, package)
    if unpacked is not None:
        return unpacked
    deb = cache / "debs" / package.file_name
    if not _has_sha256(deb, package.sha256):
        _download_deb(package, deb, log)
    home = prometheus_home(cache, package)
    log(f"unpacking {deb.name} into {home}")
    if shutil.which("dpkg-deb") is None:
        raise StreamstackError(f"dpkg-deb not found to unpack {deb}; {_prometheus_dir_hint(package)}")
    staging = Path(tempfile.mkdtemp(dir=cache, prefix=f".{home.name}."))
    try:
        _run(["dpkg-deb", "-x", str(deb), str(staging)], f"unpacking {deb}")
        _check_prometheus_runs(staging / "usr" / "bin" / "prometheus", package.upstream_version)
        (staging / PROMETHEUS_READY_MARKER).write_text(package.sha256)
        shutil.rmtree(home, ignore_errors=True)  # a stale or half-written earlier unpack
        try:
            staging.rename(home)
        except OSError:
            if _unpacked_prometheus(cache, package) is None:
                raise
            # else a concurrent `ensure` unpacked it first
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    unpacked = _unpacked_prometheus(cache, package)
    if unpacked is None:
        raise StreamstackError(f"{home} has no usr/bin/prometheus and usr/bin/promtool after unpacking {deb}")
    return unpacked


def _prometheus_dir_hint(package: DebPackage) -> str:
    return (
        f"set {PROMETHEUS_DIR_ENV} to a directory holding prometheus and promtool "
        f"{package.upstream_version} binaries"
    )


def _download_deb(package: DebPackage, target: Path, log: Callable[[str], None]) -> None:
    """`apt-get download` the pinned .deb (no system-wide install: that would start services)."""
    pinned = f"{package.name}:{package.architecture}={package.version}"
    if shutil.which("apt-get") is None:
        raise StreamstackError(f"apt-get not found to download {pinned}; {_prometheus_dir_hint(package)}")
    native = _run(["dpkg", "--print-architecture"], "asking dpkg for the architecture").strip()
    if native != package.architecture:
        raise StreamstackError(
            f"prometheus is locked for {package.architecture}, this machine is {native}; "
            f"{_prometheus_dir_hint(package)}"
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
                    f"or {_prometheus_dir_hint(package)}"
                )
            log(f"apt-get download failed ({_last_line(result.stderr)}); running apt-get update")
            try:
                _run(["apt-get", *APT_OPTIONS, "update"], f"apt-get update (to download {pinned})")
                _run(download, f"`apt-get download {pinned}` after apt-get update", cwd=workdir)
            except StreamstackError as error:
                raise StreamstackError(f"{error}; {_prometheus_dir_hint(package)}") from error
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


def _check_prometheus_runs(prometheus: Path, expected_version: str | None) -> None:
    """`prometheus --version` succeeds (and names expected_version, if given)."""
    result = _completed([str(prometheus), "--version"], f"`{prometheus} --version`", timeout=60)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise StreamstackError(f"`{prometheus} --version` failed: {_last_line(output)}")
    if expected_version is not None and f"version {expected_version}" not in output:
        raise StreamstackError(f"`{prometheus} --version` is not {expected_version}: {_last_line(output)}")


# --- Kubernetes tooling: helm and actionlint (Go, built from the module proxy), checkov (own venv) --------

GO_INSTALL_TIMEOUT_S = 1800  # a first helm build downloads ~120 modules and compiles for minutes on 2 cores
CHECKOV_VERSION = "3.3.30"
CHECKOV_CONSTRAINTS = Path(__file__).with_name("checkov-constraints.txt")
CHECKOV_INSTALL_TIMEOUT_S = 900


@dataclass(frozen=True)
class GoTool:
    """A command `go install <package>@<version>` builds; `module` is what `go version -m` reports."""

    name: str
    package: str
    module: str
    version: str


GO_TOOLS = (
    # The newest helm v3 release whose go.mod (go 1.26.0) the local Go toolchain builds.
    GoTool("helm", "helm.sh/helm/v3/cmd/helm", "helm.sh/helm/v3", "v3.22.0"),
    GoTool(
        "actionlint", "github.com/rhysd/actionlint/cmd/actionlint", "github.com/rhysd/actionlint", "v1.7.12"
    ),
)


def go_tool_path(name: str, cache: Path | None = None) -> Path:
    """Where `ensure_go_tools` puts a tool: <cache>/go/bin/<name>."""
    return (cache_dir() if cache is None else cache) / "go" / "bin" / name


def _find_go() -> str:
    go = shutil.which("go")
    if go is None:
        raise StreamstackError(
            "`go` not found on PATH: helm and actionlint are built with `go install` (Go 1.26 or newer)"
        )
    return go


def _built_module_version(go: str, binary: Path, module: str) -> str | None:
    """The version of `module` that `binary` was built from (`go version -m`), None if not a build of it."""
    if not os.access(binary, os.X_OK):
        return None
    result = _completed([go, "version", "-m", str(binary)], f"`go version -m {binary}`", timeout=60)
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] == "mod" and fields[1] == module:
            return fields[2]
    return None


def locate_go_tools(cache: Path | None = None) -> dict[str, Path]:
    """name -> path of each pinned Go tool already built; downloads nothing."""
    cache = cache_dir() if cache is None else cache
    go = _find_go()
    found, missing = {}, []
    for tool in GO_TOOLS:
        path = go_tool_path(tool.name, cache)
        if _built_module_version(go, path, tool.module) == tool.version:
            found[tool.name] = path
        else:
            missing.append(f"{tool.name} {tool.version}")
    if missing:
        raise StreamstackError(
            f"{' and '.join(missing)} missing from {cache / 'go' / 'bin'}; {KUBERNETES_TOOLS_HINT}"
        )
    return found


def ensure_go_tools(cache: Path | None = None, log: Callable[[str], None] = print) -> dict[str, Path]:
    """Build each pinned Go tool that is missing or another version: `go install` through the module proxy
    (checksums checked against go.sum and the checksum database), with the local toolchain only."""
    cache = cache_dir() if cache is None else cache
    go = _find_go()
    bin_dir = cache / "go" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in GO_TOOLS:
        target = go_tool_path(tool.name, cache)
        if _built_module_version(go, target, tool.module) == tool.version:
            continue
        log(f"building {tool.name} {tool.version} with `go install {tool.package}@{tool.version}`")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=bin_dir, prefix=f".{tool.name}-") as staging:
            environment = {
                **os.environ,
                "GOBIN": staging,
                "GOMODCACHE": str(cache / "go" / "mod"),
                "GOFLAGS": "-modcacherw -buildvcs=false",
                "GOTOOLCHAIN": "local",
            }
            try:
                result = subprocess.run(
                    [go, "install", f"{tool.package}@{tool.version}"],
                    env=environment,
                    capture_output=True,
                    text=True,
                    timeout=GO_INSTALL_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired as error:
                raise StreamstackError(
                    f"`go install {tool.package}@{tool.version}` took over {GO_INSTALL_TIMEOUT_S} s"
                ) from error
            if result.returncode != 0:
                raise StreamstackError(
                    f"`go install {tool.package}@{tool.version}` failed: {_last_line(result.stderr)}"
                )
            os.replace(Path(staging) / tool.name, target)
        if _built_module_version(go, target, tool.module) != tool.version:
            raise StreamstackError(
                f"{target} is not a build of {tool.module} {tool.version} after go install"
            )
        log(f"built {tool.name} {tool.version} in {time.monotonic() - started:.0f} s")
    return locate_go_tools(cache)


def checkov_path(cache: Path | None = None) -> Path:
    """checkov in its own virtualenv: it pins `packaging`, which clashes with the project's."""
    return (cache_dir() if cache is None else cache) / f"checkov-{CHECKOV_VERSION}" / "bin" / "checkov"


def _checkov_version(checkov: Path) -> str | None:
    """The checkov version installed next to this entry point (asked of the venv's Python: `checkov
    --version` imports every check and takes seconds)."""
    python = checkov.with_name("python")
    if not os.access(checkov, os.X_OK) or not os.access(python, os.X_OK):
        return None
    command = [str(python), "-c", "import importlib.metadata as m; print(m.version('checkov'))"]
    result = _completed(command, f"asking {python} for the checkov version", timeout=60)
    return result.stdout.strip() if result.returncode == 0 else None


def locate_checkov(cache: Path | None = None) -> Path:
    checkov = checkov_path(cache)
    if _checkov_version(checkov) != CHECKOV_VERSION:
        raise StreamstackError(
            f"checkov {CHECKOV_VERSION} missing from {checkov.parent.parent}; {KUBERNETES_TOOLS_HINT}"
        )
    return checkov


def ensure_checkov(cache: Path | None = None, log: Callable[[str], None] = print) -> Path:
    """checkov at the pinned version in <cache>/checkov-<version>, every package pinned by
    checkov-constraints.txt; created when missing or broken."""
    checkov = checkov_path(cache)
    if _checkov_version(checkov) == CHECKOV_VERSION:
        return checkov
    home = checkov.parent.parent
    log(f"installing checkov {CHECKOV_VERSION} into {home}")
    shutil.rmtree(home, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(home)], f"creating the checkov virtualenv {home}")
    pip = [str(home / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    command = [*pip, "--constraint", str(CHECKOV_CONSTRAINTS), f"checkov=={CHECKOV_VERSION}"]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=CHECKOV_INSTALL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as error:
        raise StreamstackError(f"installing checkov took over {CHECKOV_INSTALL_TIMEOUT_S} s") from error
    if result.returncode != 0:
        raise StreamstackError(f"installing checkov {CHECKOV_VERSION} failed: {_last_line(result.stderr)}")
    return locate_checkov(cache)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streamstack.runtimes",
        description="Fetch the pinned Kafka, Spark-Kafka, Prometheus, helm, actionlint and checkov.",
    )
    parser.add_argument("--check", action="store_true", help="only check the cache; download nothing")
    parser.add_argument(
        "--kubernetes-tools",
        action="store_true",
        help="also helm, actionlint and checkov (the chart, workflow and manifest checks need them)",
    )
    args = parser.parse_args(argv)
    go_tools: dict[str, Path] = {}
    checkov: Path | None = None
    try:
        runtimes = locate() if args.check else ensure()
        if args.kubernetes_tools:
            go_tools = locate_go_tools() if args.check else ensure_go_tools()
            checkov = locate_checkov() if args.check else ensure_checkov()
    except StreamstackError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"java         {runtimes.java}")
    print(f"kafka        {len(runtimes.kafka_classpath)} jars")
    print(f"spark-kafka  {len(runtimes.spark_kafka_jars)} jars")
    print(f"prometheus   {runtimes.prometheus}")
    print(f"promtool     {runtimes.promtool}")
    for name, path in go_tools.items():
        print(f"{name:<12} {path}")
    if checkov is not None:
        print(f"checkov      {checkov}")
    print(f"cache        {cache_dir()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

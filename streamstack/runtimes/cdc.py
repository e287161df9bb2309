"""The change-data-capture runtimes: PostgreSQL unpacked from the locked Debian packages (postgresql-15 and
the libpq5 its programs link), the Debezium plugin's jars (the lock's "debezium" Maven set) and the Prometheus
JMX exporter's Java agent the local Connect worker runs (the "connect-jmx-exporter" set).

PostgreSQL's programs find their share/ and lib/ directories relative to their own location, so the
unpacked tree runs where it lies; only libpq needs LD_LIBRARY_PATH. The other shared libraries the server
links (ICU, libxml2, OpenSSL, LDAP, PAM, systemd: what postgresql-15 `Depends:` on) are Debian's base and
common libraries, expected on the machine. `STREAMSTACK_POSTGRESQL_DIR` may name a directory holding
`postgres` and `initdb` instead (e.g. /usr/lib/postgresql/15/bin of an installed server).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from streamstack.errors import StreamstackError
from streamstack.paths import cache_dir
from streamstack.runtimes.fetch import _download_deb, ensure_jars
from streamstack.runtimes.locate import _has_sha256, _last_line, _prometheus_override, _run
from streamstack.runtimes.lock import (
    CONNECT_JMX_EXPORTER_SET,
    DEBEZIUM_SET,
    POSTGRESQL,
    PROMETHEUS_READY_MARKER,
    SETUP_HINT,
    CdcRuntimes,
    DebPackage,
    Lock,
    jar_path,
    load_lock,
    postgresql_home,
)


def _marker(packages: tuple[DebPackage, ...]) -> str:
    return " ".join(package.sha256 for package in packages)


def _server(packages: tuple[DebPackage, ...]) -> DebPackage:
    if not packages:
        raise StreamstackError("runtimes.lock.json has no postgresql packages; run scripts/lock_runtimes.py")
    return packages[0]


def _unpacked_postgresql(cache: Path, packages: tuple[DebPackage, ...]) -> tuple[Path, Path | None] | None:
    """(bin, lib) of the unpacked packages, if unpacked completely."""
    home = postgresql_home(cache, packages)
    major = _server(packages).upstream_version.split(".")[0]
    bin_dir = home / "usr" / "lib" / "postgresql" / major / "bin"
    try:
        ready = (home / PROMETHEUS_READY_MARKER).read_text() == _marker(packages)
    except OSError:
        return None
    if not ready or not all(os.access(bin_dir / name, os.X_OK) for name in POSTGRESQL.binaries):
        return None
    libs = sorted((home / "usr" / "lib").glob("*-linux-gnu"))
    return bin_dir, (libs[0] if libs else None)


def _override() -> tuple[Path, Path | None] | None:
    found = _prometheus_override(POSTGRESQL)
    return None if found is None else (found[0].parent, None)


_CDC_SETS = (DEBEZIUM_SET, CONNECT_JMX_EXPORTER_SET)


def _debezium_jars(cache: Path, lock: Lock) -> tuple[Path, ...]:
    return tuple(jar_path(cache, a) for a in lock.maven if a.jar_set == DEBEZIUM_SET)


def _jmx_exporter_agent(cache: Path, lock: Lock) -> Path | None:
    """The Prometheus JMX exporter's Java agent for the local Connect worker (None if the lock has none)."""
    agents = [jar_path(cache, a) for a in lock.maven if a.jar_set == CONNECT_JMX_EXPORTER_SET]
    return agents[0] if agents else None


def locate_cdc(cache: Path | None = None, lock: Lock | None = None) -> CdcRuntimes:
    """PostgreSQL and the Debezium jars already in the cache; downloads nothing."""
    cache = cache_dir() if cache is None else cache
    lock = load_lock() if lock is None else lock
    missing = [
        a for a in lock.maven if a.jar_set in _CDC_SETS and not _has_sha256(jar_path(cache, a), a.sha256)
    ]
    postgresql = _override() or _unpacked_postgresql(cache, lock.postgresql)
    problems = []
    if missing:
        problems.append(f"{len(missing)} Debezium/JMX exporter jars ({missing[0].coordinates}, ...)")
    if postgresql is None:
        problems.append(f"postgresql {_server(lock.postgresql).version}")
    if problems:
        raise StreamstackError(f"runtimes missing from {cache}: {' and '.join(problems)}; {SETUP_HINT}")
    assert postgresql is not None
    return CdcRuntimes(
        postgresql[0], postgresql[1], _debezium_jars(cache, lock), _jmx_exporter_agent(cache, lock)
    )


def ensure_cdc(
    cache: Path | None = None, log: Callable[[str], None] = print, lock: Lock | None = None
) -> CdcRuntimes:
    """PostgreSQL and the Debezium jars, after downloading and verifying whatever is missing."""
    cache = cache_dir() if cache is None else cache
    lock = load_lock() if lock is None else lock
    ensure_jars(cache, [a for a in lock.maven if a.jar_set in _CDC_SETS], log)
    postgresql = _override() or _unpacked_postgresql(cache, lock.postgresql)
    if postgresql is None:
        postgresql = _unpack_postgresql(cache, lock.postgresql, log)
    return CdcRuntimes(
        postgresql[0], postgresql[1], _debezium_jars(cache, lock), _jmx_exporter_agent(cache, lock)
    )


def _unpack_postgresql(
    cache: Path, packages: tuple[DebPackage, ...], log: Callable[[str], None]
) -> tuple[Path, Path | None]:
    debs = []
    for package in packages:
        deb = cache / "debs" / package.file_name
        if not _has_sha256(deb, package.sha256):
            _download_deb(package, deb, log, POSTGRESQL)
        debs.append(deb)
    if shutil.which("dpkg-deb") is None:
        raise StreamstackError(f"dpkg-deb not found to unpack {debs[0]}; set {POSTGRESQL.override_env}")
    home = postgresql_home(cache, packages)
    log(f"unpacking {', '.join(deb.name for deb in debs)} into {home}")
    staging = Path(tempfile.mkdtemp(dir=cache, prefix=f".{home.name}."))
    try:
        for deb in debs:
            _run(["dpkg-deb", "-x", str(deb), str(staging)], f"unpacking {deb}")
        (staging / PROMETHEUS_READY_MARKER).write_text(_marker(packages))
        shutil.rmtree(home, ignore_errors=True)
        try:
            staging.rename(home)
        except OSError:
            if _unpacked_postgresql(cache, packages) is None:
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    unpacked = _unpacked_postgresql(cache, packages)
    if unpacked is None:
        raise StreamstackError(f"{home} has no PostgreSQL programs after unpacking {debs[0]}")
    _check_postgres_runs(unpacked, _server(packages).upstream_version)
    return unpacked


def postgresql_environment(runtimes: CdcRuntimes) -> dict[str, str]:
    """The environment PostgreSQL's programs run with: LD_LIBRARY_PATH for the unpacked libpq."""
    environment = dict(os.environ)
    if runtimes.postgresql_lib is not None:
        previous = environment.get("LD_LIBRARY_PATH")
        environment["LD_LIBRARY_PATH"] = os.pathsep.join(
            [str(runtimes.postgresql_lib), *([previous] if previous else [])]
        )
    return environment


def _check_postgres_runs(postgresql: tuple[Path, Path | None], version: str) -> None:
    runtimes = CdcRuntimes(postgresql[0], postgresql[1], ())
    for name in POSTGRESQL.binaries:
        program = postgresql[0] / name
        result = _run_with(runtimes, [str(program), "--version"])
        if result.returncode != 0 or version not in result.stdout:
            raise StreamstackError(
                f"`{program} --version` is not PostgreSQL {version}: "
                f"{_last_line(result.stdout + result.stderr)} (a shared library missing? see `ldd {program}`)"
            )


def _run_with(runtimes: CdcRuntimes, argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        environment = postgresql_environment(runtimes)
        return subprocess.run(argv, env=environment, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise StreamstackError(f"`{' '.join(argv)}` failed: {error}") from error

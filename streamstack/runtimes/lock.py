"""The lock file (runtimes.lock.json, written by scripts/lock_runtimes.py): pinned Maven jars and Debian
packages with their sha256, and where each lands in the cache."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ALERTMANAGER",
    "ALERTMANAGER_DIR_ENV",
    "APT_OPTIONS",
    "APT_TIMEOUT_S",
    "CONNECT_JMX_EXPORTER_SET",
    "DEBEZIUM_SET",
    "DEFAULT_MAVEN_REPO",
    "JOBS_IMAGE_JARS_BEGIN",
    "JOBS_IMAGE_JARS_DIR",
    "JOBS_IMAGE_JARS_END",
    "KUBERNETES_TOOLS_HINT",
    "LOCK_PATH",
    "MAVEN_REPO_ENV",
    "MIN_JAVA_VERSION",
    "NETWORK_TIMEOUT_S",
    "PARALLEL_DOWNLOADS",
    "POSTGRESQL",
    "POSTGRESQL_DIR_ENV",
    "PROMETHEUS",
    "PROMETHEUS_DIR_ENV",
    "PROMETHEUS_READY_MARKER",
    "SETUP_HINT",
    "VERIFIED_STAMP_SUFFIX",
    "CdcRuntimes",
    "DebPackage",
    "DebRuntime",
    "Lock",
    "MavenArtifact",
    "Runtimes",
    "jar_path",
    "jobs_image_jar_instructions",
    "load_lock",
    "postgresql_home",
    "prometheus_home",
    "pyspark_bundles",
    "pyspark_jars_dir",
]

LOCK_PATH = Path(__file__).parent.parent / "runtimes.lock.json"


MAVEN_REPO_ENV = "STREAMSTACK_MAVEN_REPO"


DEFAULT_MAVEN_REPO = "https://repo1.maven.org/maven2"


PROMETHEUS_DIR_ENV = "STREAMSTACK_PROMETHEUS_DIR"


ALERTMANAGER_DIR_ENV = "STREAMSTACK_ALERTMANAGER_DIR"


# A directory holding `postgres` and `initdb` (e.g. /usr/lib/postgresql/15/bin) instead of the locked .debs.
POSTGRESQL_DIR_ENV = "STREAMSTACK_POSTGRESQL_DIR"


# The lock's Maven set of Debezium's PostgreSQL connector plugin (Kafka Connect runs from the "kafka" set).
DEBEZIUM_SET = "debezium"


# The lock's Maven set of the Prometheus JMX exporter's Java agent the local Connect worker runs (Strimzi's
# Connect image has its own): one self-contained jar.
CONNECT_JMX_EXPORTER_SET = "connect-jmx-exporter"


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
    """One pinned jar; jar_set is "kafka" (the broker, Kafka Connect and the tools), "kafka-metrics-reporter"
    (Strimzi's Prometheus metrics reporter, on the broker's classpath), "spark-kafka" (the connector for
    pyspark, also baked into the jobs image), "debezium" (Debezium's PostgreSQL connector plugin and what
    it needs beyond Kafka Connect's classpath) or "connect-jmx-exporter" (the Prometheus JMX exporter's Java
    agent for the local Connect worker)."""

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
    """A pinned Debian package a runtime is unpacked from (prometheus, prometheus-alertmanager)."""

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
    alertmanager: DebPackage
    # PostgreSQL's server (postgresql-15) and the libpq5 its programs link, unpacked together.
    postgresql: tuple[DebPackage, ...] = ()


@dataclass(frozen=True)
class CdcRuntimes:
    """What the change-data-capture source needs besides Kafka: PostgreSQL's programs (`bin`: postgres,
    initdb, pg_ctl; `lib`: the libpq they link, for LD_LIBRARY_PATH; None when the system's are used) and
    the Debezium plugin's jars (Kafka Connect itself runs from `Runtimes.kafka_classpath`)."""

    postgresql_bin: Path
    postgresql_lib: Path | None
    debezium_jars: tuple[Path, ...]
    jmx_exporter_agent: Path | None = None  # the lock's connect-jmx-exporter jar


@dataclass(frozen=True)
class Runtimes:
    """Paths of the runtimes, all present and verified."""

    java: Path
    kafka_classpath: tuple[Path, ...]
    spark_kafka_jars: tuple[Path, ...]
    metrics_reporter_jars: tuple[Path, ...]
    prometheus: Path
    promtool: Path
    alertmanager: Path
    amtool: Path


@dataclass(frozen=True)
class DebRuntime:
    """What a Debian package of the lock provides: two programs under usr/bin (the first answers
    `--version`), or the same two in the directory named by `override_env`."""

    binaries: tuple[str, str]
    override_env: str


PROMETHEUS = DebRuntime(("prometheus", "promtool"), PROMETHEUS_DIR_ENV)


ALERTMANAGER = DebRuntime(("prometheus-alertmanager", "amtool"), ALERTMANAGER_DIR_ENV)


POSTGRESQL = DebRuntime(("postgres", "initdb"), POSTGRESQL_DIR_ENV)


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
        alertmanager=DebPackage(**data["alertmanager"]),
        postgresql=tuple(DebPackage(**entry) for entry in data.get("postgresql", [])),
    )


# The jobs image (jobs/Dockerfile) bakes the lock's "spark-kafka" set into Spark's jars directory: the lines
# between these markers are generated by scripts/lock_runtimes.py from the lock (tests/test_images.py checks).
JOBS_IMAGE_JARS_BEGIN = (
    "# BEGIN spark-kafka jars: generated from streamstack/runtimes.lock.json by scripts/lock_runtimes.py"
)


JOBS_IMAGE_JARS_END = "# END spark-kafka jars"


JOBS_IMAGE_JARS_DIR = "/opt/spark/jars/"


def jobs_image_jar_instructions(lock: Lock) -> str:
    """One `ADD --checksum` per jar of the lock's spark-kafka set: the same URL and sha256 `ensure` uses."""
    return "".join(
        f"ADD --checksum=sha256:{artifact.sha256} --chmod=644 \\\n"
        f"    {DEFAULT_MAVEN_REPO}/{artifact.repository_path} \\\n"
        f"    {JOBS_IMAGE_JARS_DIR}\n"
        for artifact in lock.maven
        if artifact.jar_set == "spark-kafka"
    )


def pyspark_jars_dir() -> Path:
    """The jars pyspark ships (its Spark distribution), from the installed pyspark."""
    import pyspark  # noqa: PLC0415 - only the lock script and its tests need it, and it is slow to import

    return Path(pyspark.__file__).parent / "jars"


def pyspark_bundles(artifact: str, jars_dir: Path) -> bool:
    """Whether pyspark ships a jar of `artifact` (any version: `<artifact>-<digit>....jar`)."""
    return any(re.fullmatch(rf"{re.escape(artifact)}-\d.*\.jar", jar.name) for jar in jars_dir.glob("*.jar"))


def jar_path(cache: Path, artifact: MavenArtifact) -> Path:
    return cache / "maven" / artifact.repository_path


def postgresql_home(cache: Path, packages: tuple[DebPackage, ...]) -> Path:
    """Where the PostgreSQL .debs are unpacked together (<cache>/<first name>-<version>)."""
    return cache / f"{packages[0].name}-{packages[0].version}"


def prometheus_home(cache: Path, package: DebPackage) -> Path:
    """Where a .deb is unpacked (<cache>/<name>-<version>); the binaries are in usr/bin below it."""
    return cache / f"{package.name}-{package.version}"

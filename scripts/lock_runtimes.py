"""Regenerate streamstack/runtimes.lock.json: pinned Maven jars and the Prometheus, Alertmanager and
PostgreSQL .debs, with sha256; then the jobs image's connector jars (jobs/Dockerfile) from the same lock
entries.

Maintainers only (needs mvn, apt-get and network); `streamstack.runtimes` reads the lock at run time.

    .venv/bin/python scripts/lock_runtimes.py                 # the lock, then jobs/Dockerfile
    .venv/bin/python scripts/lock_runtimes.py --dockerfile    # only jobs/Dockerfile, from the lock as it is
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from streamstack import runtimes
from streamstack.paths import REPO_ROOT
from streamstack.runtimes import sha256_of

LOCK_PATH = REPO_ROOT / "streamstack" / "runtimes.lock.json"
JOBS_DOCKERFILE = REPO_ROOT / "jobs" / "Dockerfile"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

# Roots of the broker + command line tools classpath; their runtime closure is locked.
KAFKA_ROOTS = [
    "org.apache.kafka:kafka_2.13:4.3.1",
    "org.apache.kafka:kafka-tools:4.3.1",
    # The slf4j binding, so the broker logs through log4j2.
    "org.apache.logging.log4j:log4j-slf4j-impl:2.25.4",
]

# Strimzi's Prometheus metrics reporter, loaded by the local broker so that it exports the metric names a
# Strimzi cluster with `metricsConfig: {type: strimziMetricsReporter}` exports. Strimzi 1.2.0 bundles
# io.strimzi:server-metrics-reporter 0.4.0, which Maven Central (as reachable when locking) does not serve;
# metrics-reporter 0.2.0 is its predecessor with the same naming. Its runtime closure (the io.prometheus
# client it needs; Kafka, Yammer and slf4j are `provided` by the broker) is locked.
METRICS_REPORTER_ROOTS = ["io.strimzi:metrics-reporter:0.2.0"]

# The Kafka source/sink; locked with its runtime closure minus every artifact pyspark already bundles (in
# any version: pyspark's jar wins), which leaves the connector, its token provider, kafka-clients and
# commons-pool2 at the versions the connector's POM declares.
SPARK_KAFKA_CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"

# Debezium's PostgreSQL connector, a Kafka Connect plugin: its runtime closure minus every artifact the
# "kafka" set (Kafka Connect's own classpath) already has, in any version, which leaves the Debezium modules,
# the PostgreSQL JDBC driver, protobuf-java and the few libraries Connect lacks. Every Debezium module is
# 3.6.1.Final; that release is built against Kafka 4.3.0's connect-api (its POM's closure), the API that
# Kafka 4.3.1, a patch release, keeps.
DEBEZIUM_ROOTS = ["io.debezium:debezium-connector-postgres:3.6.1.Final"]

# The Prometheus JMX exporter's Java agent (one shaded jar) for the local Connect worker: the newest release
# Maven Central serves here (maven-metadata.xml <release>).
CONNECT_JMX_EXPORTER_ROOTS = ["io.prometheus.jmx:jmx_prometheus_javaagent:1.0.1"]

# Debian bookworm's PostgreSQL 15 server and the libpq5 its programs link; unpacked, never installed.
POSTGRESQL_PACKAGES = ("postgresql-15", "libpq5")
POSTGRESQL_VERSION = "15.20-0+deb12u1"

NOTE = (
    "spark-kafka is the Kafka source/sink for pyspark 4.3.0: Maven Central (as reachable when locking) "
    "has no spark-sql-kafka-0-10_2.13:4.3.0 (nor token provider 4.3.0), so the set is spark-sql-kafka "
    "4.2.0 with the runtime dependencies its POM declares that pyspark does not bundle (token provider "
    "4.2.0, kafka-clients 3.9.2, commons-pool2 2.13.1); it reads and writes Kafka with pyspark 4.3.0. "
    "Move to 4.3.0 once published. kafka-metrics-reporter is io.strimzi:metrics-reporter 0.2.0 and its "
    "runtime closure, on the local broker's classpath: Strimzi 1.2.0 bundles "
    "io.strimzi:server-metrics-reporter 0.4.0, which Maven Central does not serve here; 0.2.0 emits the "
    "same metric names."
)

PROMETHEUS_PACKAGE = "prometheus"
PROMETHEUS_VERSION = "2.42.0+ds-5+deb12u1"
PROMETHEUS_ARCHITECTURE = "amd64"
# Debian bookworm's Alertmanager (with amtool): runs the routing config infra/alertmanager.py renders.
ALERTMANAGER_PACKAGE = "prometheus-alertmanager"
ALERTMANAGER_VERSION = "0.25.0-1+b4"


def pom_xml(coordinates: list[str], transitive: bool) -> str:
    exclusions = (
        ""
        if transitive
        else "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
    )
    dependencies = "".join(
        f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
        f"<version>{version}</version>{exclusions}</dependency>"
        for group, artifact, version in (c.split(":") for c in coordinates)
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>streamstack.lock</groupId><artifactId>lock</artifactId><version>0</version>"
        f"<dependencies>{dependencies}</dependencies></project>"
    )


def resolve(coordinates: list[str], transitive: bool, workdir: Path) -> list[tuple[str, str, str, Path]]:
    """(group, artifact, version, jar in ~/.m2) for the runtime closure, or just the given jars."""
    workdir.mkdir(parents=True)
    (workdir / "pom.xml").write_text(pom_xml(coordinates, transitive))
    listing = workdir / "dependencies.txt"
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            f"{DEPENDENCY_PLUGIN}:list",
            "-DincludeScope=runtime",
            "-DoutputAbsoluteArtifactFilename=true",
            f"-DoutputFile={listing}",
        ],
        cwd=workdir,
        check=True,
    )
    resolved = []
    # Lines look like "   group:artifact:jar:version:scope:/abs/path.jar -- module name".
    for line in listing.read_text().splitlines():
        entry = line.strip().split(" -- ")[0]
        if ":/" not in entry:
            continue
        coordinate_part, path_part = entry.split(":/", 1)
        fields = coordinate_part.split(":")
        if len(fields) != 5 or fields[2] != "jar":
            sys.exit(f"unsupported dependency (classifier or non-jar type): {entry}")
        group, artifact, _type, version, _scope = fields
        resolved.append((group, artifact, version, Path("/" + path_part)))
    return sorted(resolved)


def download_deb(package: str, version: str, architecture: str, workdir: Path) -> Path:
    workdir.mkdir(parents=True)
    subprocess.run(["apt-get", "download", f"{package}:{architecture}={version}"], cwd=workdir, check=True)
    (deb,) = workdir.glob("*.deb")
    return deb


def spark_kafka_set(workdir: Path) -> list[tuple[str, str, str, Path]]:
    closure = resolve([SPARK_KAFKA_CONNECTOR], transitive=True, workdir=workdir)
    jars_dir = runtimes.pyspark_jars_dir()
    return [entry for entry in closure if not runtimes.pyspark_bundles(entry[1], jars_dir)]


def write_dockerfile(lock: runtimes.Lock) -> None:
    """Rewrite the generated block of jobs/Dockerfile: one checksummed ADD per jar of the spark-kafka set."""
    text = JOBS_DOCKERFILE.read_text()
    begin, end = runtimes.JOBS_IMAGE_JARS_BEGIN, runtimes.JOBS_IMAGE_JARS_END
    if text.count(begin) != 1 or text.count(end) != 1:
        sys.exit(f"{JOBS_DOCKERFILE} needs exactly one {begin!r} and one {end!r} line")
    head, rest = text.split(begin + "\n", 1)
    _, tail = rest.split(end + "\n", 1)
    JOBS_DOCKERFILE.write_text(f"{head}{begin}\n{runtimes.jobs_image_jar_instructions(lock)}{end}\n{tail}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--dockerfile"]:
        write_dockerfile(runtimes.load_lock(LOCK_PATH))
        print(f"wrote {JOBS_DOCKERFILE} from {LOCK_PATH}")
        return 0
    if args:
        sys.exit("usage: lock_runtimes.py [--dockerfile]")
    with tempfile.TemporaryDirectory(prefix="streamstack-lock-") as tmp:
        tmpdir = Path(tmp)
        kafka = resolve(KAFKA_ROOTS, transitive=True, workdir=tmpdir / "kafka")
        reporter = resolve(METRICS_REPORTER_ROOTS, transitive=True, workdir=tmpdir / "metrics-reporter")
        on_broker = {(group, artifact) for group, artifact, _, _ in kafka}
        clashes = [
            f"{group}:{artifact}" for group, artifact, _, _ in reporter if (group, artifact) in on_broker
        ]
        if clashes:
            sys.exit(f"the metrics reporter brings jars the broker already has: {', '.join(clashes)}")
        spark_kafka = spark_kafka_set(tmpdir / "spark-kafka")
        debezium = [
            entry
            for entry in resolve(DEBEZIUM_ROOTS, transitive=True, workdir=tmpdir / "debezium")
            if (entry[0], entry[1]) not in on_broker
        ]
        jmx_exporter = resolve(CONNECT_JMX_EXPORTER_ROOTS, transitive=False, workdir=tmpdir / "jmx-exporter")
        maven = [
            {
                "set": jar_set,
                "group": group,
                "artifact": artifact,
                "version": version,
                "sha256": sha256_of(jar),
            }
            for jar_set, jars in (
                ("kafka", kafka),
                ("kafka-metrics-reporter", reporter),
                ("spark-kafka", spark_kafka),
                ("debezium", debezium),
                ("connect-jmx-exporter", jmx_exporter),
            )
            for group, artifact, version, jar in jars
        ]
        deb = download_deb(PROMETHEUS_PACKAGE, PROMETHEUS_VERSION, PROMETHEUS_ARCHITECTURE, tmpdir / "debs")
        alertmanager_deb = download_deb(
            ALERTMANAGER_PACKAGE, ALERTMANAGER_VERSION, PROMETHEUS_ARCHITECTURE, tmpdir / "alertmanager-debs"
        )
        postgresql_debs = [
            download_deb(name, POSTGRESQL_VERSION, PROMETHEUS_ARCHITECTURE, tmpdir / f"{name}-debs")
            for name in POSTGRESQL_PACKAGES
        ]
        lock = json.loads(LOCK_PATH.read_text())  # entries this script does not make are kept as they are
        lock.update(
            {
                "note": NOTE,
                "generated_by": "scripts/lock_runtimes.py",
                "maven": maven,
                "prometheus": {
                    "name": PROMETHEUS_PACKAGE,
                    "version": PROMETHEUS_VERSION,
                    "architecture": PROMETHEUS_ARCHITECTURE,
                    "sha256": sha256_of(deb),
                },
                "alertmanager": {
                    "name": ALERTMANAGER_PACKAGE,
                    "version": ALERTMANAGER_VERSION,
                    "architecture": PROMETHEUS_ARCHITECTURE,
                    "sha256": sha256_of(alertmanager_deb),
                },
                "postgresql": [
                    {
                        "name": name,
                        "version": POSTGRESQL_VERSION,
                        "architecture": PROMETHEUS_ARCHITECTURE,
                        "sha256": sha256_of(deb_file),
                    }
                    for name, deb_file in zip(POSTGRESQL_PACKAGES, postgresql_debs, strict=True)
                ],
            }
        )
    LOCK_PATH.write_text(json.dumps(lock, indent=2) + "\n")
    write_dockerfile(runtimes.load_lock(LOCK_PATH))
    print(
        f"wrote {LOCK_PATH}: {len(kafka)} kafka jars, {len(reporter)} metrics reporter jars, "
        f"{len(spark_kafka)} spark-kafka jars, {len(debezium)} debezium jars, "
        f"{deb.name}, {alertmanager_deb.name}; and {JOBS_DOCKERFILE}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Regenerate streamstack/runtimes.lock.json: pinned Maven jars and the Prometheus .deb, with sha256.

Maintainers only (needs mvn, apt-get and network); `streamstack.runtimes` reads the lock at run time.

    python scripts/lock_runtimes.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from streamstack.runtimes import sha256_of

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCK_PATH = REPO_ROOT / "streamstack" / "runtimes.lock.json"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

# Roots of the broker + command line tools classpath; their runtime closure is locked.
KAFKA_ROOTS = [
    "org.apache.kafka:kafka_2.13:4.3.1",
    "org.apache.kafka:kafka-tools:4.3.1",
    # The slf4j binding, so the broker logs through log4j2.
    "org.apache.logging.log4j:log4j-slf4j-impl:2.25.4",
]

# Locked as is, without their dependencies: pyspark bundles the rest.
SPARK_KAFKA_JARS = [
    "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0",
    "org.apache.spark:spark-token-provider-kafka-0-10_2.13:4.0.0",
    "org.apache.kafka:kafka-clients:3.9.2",
    "org.apache.commons:commons-pool2:2.13.1",
]

SPARK_KAFKA_NOTE = (
    "spark-kafka is the Kafka source/sink for pyspark 4.3.0. Maven Central (as reachable when locking) "
    "has no spark-sql-kafka-0-10_2.13:4.3.0 and no spark-token-provider-kafka-0-10_2.13 newer than 4.0.0, "
    "so the set pins spark-sql-kafka 4.2.0 + token-provider 4.0.0 + kafka-clients 3.9.2 + "
    "commons-pool2 2.13.1 (the rest is bundled with pyspark); this combination was tested to read and "
    "write Kafka with pyspark 4.3.0. Move to the 4.3.0 artifacts once they are published."
)

PROMETHEUS_PACKAGE = "prometheus"
PROMETHEUS_VERSION = "2.42.0+ds-5+deb12u1"
PROMETHEUS_ARCHITECTURE = "amd64"


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


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="streamstack-lock-") as tmp:
        tmpdir = Path(tmp)
        kafka = resolve(KAFKA_ROOTS, transitive=True, workdir=tmpdir / "kafka")
        spark_kafka = resolve(SPARK_KAFKA_JARS, transitive=False, workdir=tmpdir / "spark-kafka")
        if len(spark_kafka) != len(SPARK_KAFKA_JARS):
            sys.exit(f"expected {len(SPARK_KAFKA_JARS)} spark-kafka jars, resolved {len(spark_kafka)}")
        maven = [
            {
                "set": jar_set,
                "group": group,
                "artifact": artifact,
                "version": version,
                "sha256": sha256_of(jar),
            }
            for jar_set, jars in (("kafka", kafka), ("spark-kafka", spark_kafka))
            for group, artifact, version, jar in jars
        ]
        deb = download_deb(PROMETHEUS_PACKAGE, PROMETHEUS_VERSION, PROMETHEUS_ARCHITECTURE, tmpdir / "debs")
        lock = {
            "note": SPARK_KAFKA_NOTE,
            "generated_by": "scripts/lock_runtimes.py",
            "maven": maven,
            "prometheus": {
                "name": PROMETHEUS_PACKAGE,
                "version": PROMETHEUS_VERSION,
                "architecture": PROMETHEUS_ARCHITECTURE,
                "sha256": sha256_of(deb),
            },
        }
    LOCK_PATH.write_text(json.dumps(lock, indent=2) + "\n")
    print(f"wrote {LOCK_PATH}: {len(kafka)} kafka jars, {len(spark_kafka)} spark-kafka jars, {deb.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Write the upstream operators' CRDs into infra/crds/<chart>-<version>/ from pinned, checksummed sources,
with a `source.json` recording where they came from and each file's sha256 (infra/components/crds.py refuses
a file that does not match it).

Helm never upgrades the CRDs of a chart's crds/ directory, so the Pulumi program installs the CRDs itself (the
releases skip theirs). After bumping a chart version in infra/config/versions.py, add its source to SOURCES
and run this script; `tests/infra/test_crds.py` fails until the CRDs of every pinned chart version are here.

Maintainers only (needs go, mvn, Java 21+ and network). Sources, all reachable from a machine that builds
the project:
- kube-prometheus-stack: the prometheus-operator Go module at the chart's appVersion (its charts/crds/crds/
  files are `example/prometheus-operator-crd/` with a comment line on top), downloaded with `go mod download`,
  which checks the module against the Go checksum database.
- spark-operator: the spark-operator Go module at the chart's version, `charts/spark-operator-chart/crds/`.
- strimzi-kafka-operator: generated as Strimzi's build generates its chart's crds/ (the `CrdGenerator` of
  io.strimzi:crd-generator over the model classes of io.strimzi:api, both from Maven Central at the chart's
  version, with the arguments of api's POM), byte for byte the files the chart ships.

    .venv/bin/python scripts/vendor_crds.py            # write every chart's CRDs (replaces the directory)
    .venv/bin/python scripts/vendor_crds.py --check    # fetch again and compare with infra/crds; no writes
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from streamstack.paths import REPO_ROOT, cache_dir

CRD_ROOT = REPO_ROOT / "infra" / "crds"
SOURCE_FILE = "source.json"
MAVEN_REPOSITORY = "https://repo1.maven.org/maven2"
MIN_STRIMZI_JAVA = 21  # io.strimzi:crd-generator 1.2.0 is built for Java 21 (class file version 65)
_POM = "{http://maven.apache.org/POM/4.0.0}"


@dataclass(frozen=True)
class GoModuleCrds:
    """CRD files in one directory of a Go module."""

    module: str
    version: str
    directory: str
    note: str


@dataclass(frozen=True)
class StrimziGeneratedCrds:
    """Strimzi's CRDs as its build generates them from io.strimzi:api with io.strimzi:crd-generator."""

    version: str
    note: str


# (chart, chart version) -> where its CRDs come from. Add an entry when a chart version is bumped.
SOURCES: Mapping[tuple[str, str], GoModuleCrds | StrimziGeneratedCrds] = {
    ("strimzi-kafka-operator", "1.2.0"): StrimziGeneratedCrds(
        "1.2.0", "the chart's crds/ are Strimzi's packaging/install/cluster-operator/04x-Crd-*.yaml"
    ),
    ("spark-operator", "2.5.2"): GoModuleCrds(
        "github.com/kubeflow/spark-operator/v2",
        "v2.5.2",
        "charts/spark-operator-chart/crds",
        "the chart's own crds/ directory",
    ),
    ("kube-prometheus-stack", "88.5.3"): GoModuleCrds(
        "github.com/prometheus-operator/prometheus-operator",
        "v0.93.1",
        "example/prometheus-operator-crd",
        "kube-prometheus-stack 88.5.3's appVersion; its charts/crds/crds/crd-*.yaml are these files "
        "with a comment line naming the source",
    ),
}


class VendorError(RuntimeError):
    pass


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _go_environment() -> dict[str, str]:
    cache = cache_dir()
    return {
        **os.environ,
        "GOMODCACHE": str(cache / "go" / "mod"),
        "GOFLAGS": "-modcacherw",
        "GOTOOLCHAIN": "local",
    }


def go_module_crds(source: GoModuleCrds) -> tuple[dict[str, bytes], dict[str, object]]:
    """The module's CRD files; `go mod download` verifies the module against the Go checksum database."""
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            ["go", "mod", "download", "-json", f"{source.module}@{source.version}"],
            cwd=scratch,
            env=_go_environment(),
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        raise VendorError(f"go mod download {source.module}@{source.version}: {result.stdout}{result.stderr}")
    download = json.loads(result.stdout)
    directory = Path(download["Dir"]) / source.directory
    files = {path.name: path.read_bytes() for path in sorted(directory.glob("*.yaml"))}
    if not files:
        raise VendorError(f"no *.yaml in {source.directory} of {source.module}@{source.version}")
    provenance: dict[str, object] = {
        "type": "go-module",
        "module": source.module,
        "version": source.version,
        "directory": source.directory,
        # The module's hash in the Go checksum database (go.sum's h1:), and the zip the proxy served.
        "sum": download["Sum"],
        "zipSha256": sha256_bytes(Path(download["Zip"]).read_bytes()),
        "note": source.note,
    }
    return files, provenance


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if java is None:
        raise VendorError(f"Java {MIN_STRIMZI_JAVA}+ is needed for Strimzi's CRD generator: set JAVA_HOME")
    version = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)', version)
    if match is None or int(match.group(1)) < MIN_STRIMZI_JAVA:
        raise VendorError(
            f"{java} is not Java {MIN_STRIMZI_JAVA}+ ({version.splitlines()[:1]}): set JAVA_HOME to one"
        )
    return java


def generator_arguments(api_pom: str) -> tuple[list[str], dict[str, str]]:
    """The CrdGenerator options and `class -> file name` of api's POM (its `generate-crd-*` execution)."""
    root = ElementTree.fromstring(api_pom)
    for execution in root.iter(f"{_POM}execution"):
        execution_id = execution.findtext(f"{_POM}id") or ""
        if not execution_id.startswith("generate-crd"):
            continue
        arguments = [item.text or "" for item in execution.iter(f"{_POM}argument")]
        main = arguments.index("io.strimzi.crdgenerator.CrdGenerator")
        options, outputs = [], {}
        for argument in arguments[main + 1 :]:
            if "=" in argument and "$" in argument:
                model, target = argument.split("=", 1)
                outputs[model] = re.split(r"[/\\}]", target)[-1]
            else:
                options.append(argument)
        return options, outputs
    raise VendorError("io.strimzi:api's POM has no generate-crd execution")


def strimzi_crds(source: StrimziGeneratedCrds) -> tuple[dict[str, bytes], dict[str, object]]:
    java = _java()
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        (scratch / "pom.xml").write_text(
            f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>streamstack.vendor</groupId><artifactId>strimzi-crds</artifactId><version>0</version>
  <dependencies>
    <dependency><groupId>io.strimzi</groupId><artifactId>api</artifactId>
      <version>{source.version}</version></dependency>
    <dependency><groupId>io.strimzi</groupId><artifactId>crd-generator</artifactId>
      <version>{source.version}</version></dependency>
  </dependencies>
</project>
"""
        )
        resolve = subprocess.run(
            ["mvn", "-B", "-q", "dependency:build-classpath", "-Dmdep.outputFile=classpath.txt"],
            cwd=scratch,
            capture_output=True,
            text=True,
            check=False,
        )
        if resolve.returncode != 0:
            raise VendorError(f"mvn could not resolve io.strimzi:api {source.version}: {resolve.stdout}")
        classpath = (scratch / "classpath.txt").read_text().strip()
        jars = {Path(jar).name: Path(jar) for jar in classpath.split(os.pathsep)}
        strimzi_jars = {name: jars[f"{name}-{source.version}.jar"] for name in ("api", "crd-generator")}
        api_pom = strimzi_jars["api"].with_suffix(".pom").read_text()
        options, outputs = generator_arguments(api_pom)
        out = scratch / "out"
        out.mkdir()
        generate = subprocess.run(
            [
                java,
                "-cp",
                classpath,
                "io.strimzi.crdgenerator.CrdGenerator",
                *options,
                *(f"{model}={out / name}" for model, name in outputs.items()),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if generate.returncode != 0:
            raise VendorError(f"Strimzi's CrdGenerator failed: {generate.stdout}{generate.stderr}")
        files = {path.name: path.read_bytes() for path in sorted(out.glob("*.yaml"))}
    if sorted(files) != sorted(outputs.values()):
        raise VendorError(f"CrdGenerator wrote {sorted(files)}, the POM names {sorted(outputs.values())}")
    provenance: dict[str, object] = {
        "type": "strimzi-crd-generator",
        "artifacts": {
            f"io.strimzi:{name}:{source.version}": sha256_bytes(jar.read_bytes())
            for name, jar in strimzi_jars.items()
        },
        "repository": MAVEN_REPOSITORY,
        "generatorOptions": options,
        "note": source.note,
    }
    return files, provenance


def fetch(chart: str, version: str) -> tuple[dict[str, bytes], dict[str, object]]:
    source = SOURCES[(chart, version)]
    files, provenance = go_module_crds(source) if isinstance(source, GoModuleCrds) else strimzi_crds(source)
    record: dict[str, object] = {
        "chart": chart,
        "chartVersion": version,
        "source": provenance,
        "files": {name: sha256_bytes(data) for name, data in sorted(files.items())},
    }
    return files, record


def directory_of(chart: str, version: str) -> Path:
    return CRD_ROOT / f"{chart}-{version}"


def write(chart: str, version: str, files: Mapping[str, bytes], record: Mapping[str, object]) -> None:
    directory = directory_of(chart, version)
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    (directory / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n")


def check(chart: str, version: str, files: Mapping[str, bytes], record: Mapping[str, object]) -> list[str]:
    directory = directory_of(chart, version)
    problems = []
    vendored = {path.name: path.read_bytes() for path in sorted(directory.glob("*.yaml"))}
    if vendored != dict(files):
        problems.append(f"{directory}: the files differ from the source's")
    source_path = directory / SOURCE_FILE
    if not source_path.is_file() or json.loads(source_path.read_text()) != record:
        problems.append(f"{source_path}: differs from the source's record")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with infra/crds instead of writing")
    args = parser.parse_args(argv)
    problems: list[str] = []
    for chart, version in SOURCES:
        files, record = fetch(chart, version)
        if args.check:
            problems += check(chart, version, files, record)
        else:
            write(chart, version, files, record)
            print(f"{directory_of(chart, version).relative_to(REPO_ROOT)}: {len(files)} CRD files")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

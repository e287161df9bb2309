"""The three Dockerfiles (jobs, exporter, Kafka Connect), read as data (no Docker engine here to build
them): pinned base images, non-root users, the connector and plugin jars and Python packages at exactly the
project's pins, layouts the charts rely on, and checkov."""

from __future__ import annotations

import ast
import fnmatch
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from streamstack import runtimes
from streamstack.paths import REPO_ROOT
from tests.charts.checkov import assert_clean, run_checkov

JOBS_DOCKERFILE = REPO_ROOT / "jobs" / "Dockerfile"
EXPORTER_DOCKERFILE = REPO_ROOT / "monitoring" / "Dockerfile"
CONNECT_DOCKERFILE = REPO_ROOT / "infra" / "connect" / "Dockerfile"
SHA256 = r"[0-9a-f]{64}"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    heredoc: str = ""


def parse(path: Path) -> list[Instruction]:
    """Instructions with continuation lines joined and heredoc bodies attached; comments dropped."""
    lines = path.read_text().splitlines()
    instructions = []
    index = 0
    while index < len(lines):
        text = lines[index].strip()
        index += 1
        if not text or text.startswith("#"):
            continue
        while text.endswith("\\"):
            text = text[:-1].rstrip() + " " + lines[index].strip()
            index += 1
        keyword, _, arguments = text.partition(" ")
        body = []
        heredoc = re.search(r"<<-?(\w+)", arguments)
        if heredoc:
            while lines[index].strip() != heredoc.group(1):
                body.append(lines[index])
                index += 1
            index += 1
        instructions.append(Instruction(keyword.upper(), arguments.strip(), "\n".join(body)))
    return instructions


def only(instructions: list[Instruction], keyword: str) -> list[Instruction]:
    return [instruction for instruction in instructions if instruction.keyword == keyword]


def project_pins() -> dict[str, str]:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    pins = {}
    for requirement in pyproject["project"]["dependencies"]:
        name, _, version = requirement.partition("==")
        pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def chart_defaults(chart: str) -> dict[str, object]:
    loaded: dict[str, object] = yaml.safe_load((REPO_ROOT / "charts" / chart / "values.yaml").read_text())
    return loaded


def pip_requirements(instructions: list[Instruction]) -> dict[str, tuple[str, str]]:
    """name -> (version, sha256s) from the requirements file the Dockerfile writes with a heredoc."""
    requirements = {}
    for instruction in instructions:
        for match in re.finditer(
            rf"^([A-Za-z0-9_.-]+)==(\S+)((?: --hash=sha256:{SHA256})+)$", instruction.heredoc, re.M
        ):
            requirements[match.group(1).lower()] = (match.group(2), match.group(3).strip())
    return requirements


def constraint_pins() -> dict[str, str]:
    """name -> version of every package constraints.txt pins (names normalized)."""
    pins = {}
    for line in (REPO_ROOT / "constraints.txt").read_text().splitlines():
        name, separator, version = line.partition("==")
        if separator:
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


# The jobs image's packages beyond the exporter's: pandas and pyarrow (pandas functions) at
# pyproject's pins, and what they need at run time, installed with --no-deps, at constraints.txt's pins.
JOBS_ONLY_PINNED = ("pandas", "pyarrow")
JOBS_ONLY_DEPENDENCIES = ("numpy", "python-dateutil", "pytz", "tzdata")


@pytest.mark.parametrize("dockerfile", [JOBS_DOCKERFILE, EXPORTER_DOCKERFILE], ids=["jobs", "exporter"])
def test_syntax_and_base_image_are_pinned(dockerfile: Path) -> None:
    assert re.match(r"^# syntax=docker/dockerfile:\d+\.\d+\n", dockerfile.read_text())
    (base,) = only(parse(dockerfile), "FROM")
    assert "latest" not in base.arguments
    assert re.fullmatch(r"[a-z/]+:[0-9][\w.-]+(@sha256:[0-9a-f]{64})?", base.arguments), base.arguments


def test_jobs_image_is_the_official_spark_image_of_the_pinned_version() -> None:
    (base,) = only(parse(JOBS_DOCKERFILE), "FROM")
    match = re.fullmatch(
        r"apache/spark:(\d+\.\d+\.\d+)-scala2\.13-java17-python3-ubuntu(@sha256:[0-9a-f]{64})?",
        base.arguments,
    )
    assert match, base.arguments
    assert match.group(1) == project_pins()["pyspark"] == chart_defaults("streaming-job")["sparkVersion"]
    chart = yaml.safe_load((REPO_ROOT / "charts" / "streaming-job" / "Chart.yaml").read_text())
    assert chart["appVersion"].endswith(f"-spark{match.group(1)}"), "the image tag names its Spark version"


def test_exporter_image_is_slim_python_311_pinned_by_digest() -> None:
    (base,) = only(parse(EXPORTER_DOCKERFILE), "FROM")
    assert re.fullmatch(rf"python:3\.11\.\d+-slim(-[a-z]+)?@sha256:{SHA256}", base.arguments), base.arguments


@pytest.mark.parametrize(
    ("dockerfile", "chart"), [(JOBS_DOCKERFILE, "streaming-job"), (EXPORTER_DOCKERFILE, "lag-exporter")]
)
def test_images_run_as_the_non_root_user_the_chart_expects(dockerfile: Path, chart: str) -> None:
    instructions = parse(dockerfile)
    assert instructions[-1].keyword in ("USER", "ENTRYPOINT", "EXPOSE")
    user = only(instructions, "USER")[-1].arguments
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, "a numeric uid, so that runAsNonRoot can verify it"
    assert gid.isdigit() and int(gid) != 0
    security: dict[str, int] = chart_defaults(chart)["podSecurityContext"]  # type: ignore[assignment]
    assert (security["runAsUser"], security["runAsGroup"]) == (int(uid), int(gid))


def test_connector_jars_are_the_locked_ones() -> None:
    lock = runtimes.load_lock()
    locked = {
        (artifact.repository_path, artifact.sha256)
        for artifact in lock.maven
        if artifact.jar_set == "spark-kafka"
    }
    baked = set()
    maven = re.escape(runtimes.DEFAULT_MAVEN_REPO)
    for instruction in only(parse(JOBS_DOCKERFILE), "ADD"):
        match = re.fullmatch(
            rf"--checksum=sha256:({SHA256}) --chmod=644 {maven}/(\S+\.jar) /opt/spark/jars/",
            instruction.arguments,
        )
        assert match, instruction.arguments
        baked.add((match.group(2), match.group(1)))
    assert baked == locked
    assert len(baked) == 4


def test_connector_jars_are_generated_from_the_lock() -> None:
    """The ADDs are the block scripts/lock_runtimes.py writes from the lock: one source for the jobs image and
    the local runtime (`runtimes.ensure` fetches the same URLs with the same sha256); none outside it."""
    text = JOBS_DOCKERFILE.read_text()
    begin, end = runtimes.JOBS_IMAGE_JARS_BEGIN, runtimes.JOBS_IMAGE_JARS_END
    assert text.count(f"\n{begin}\n") == 1 and text.count(f"\n{end}\n") == 1, (
        "run `.venv/bin/python scripts/lock_runtimes.py --dockerfile`"
    )
    before, rest = text.split(f"\n{begin}\n")
    block, after = rest.split(f"\n{end}\n")
    assert block + "\n" == runtimes.jobs_image_jar_instructions(runtimes.load_lock()), (
        "jobs/Dockerfile is out of step with streamstack/runtimes.lock.json: run "
        "`.venv/bin/python scripts/lock_runtimes.py --dockerfile`"
    )
    assert ".jar" not in before + after


def test_python_packages_are_the_project_pins() -> None:
    pins = project_pins()
    jobs = parse(JOBS_DOCKERFILE)
    exporter = parse(EXPORTER_DOCKERFILE)
    constraints = constraint_pins()
    shared = {"kafka-python": pins["kafka-python"], "prometheus-client": pins["prometheus-client"]}
    jobs_only = {
        **{name: pins[name] for name in JOBS_ONLY_PINNED},
        **{name: constraints[name] for name in JOBS_ONLY_DEPENDENCIES},
    }
    # The exporter reads the CDC replication slot with psycopg (and its one dependency on Python 3.11).
    # It reads metadata and offsets with librdkafka (confluent-kafka: its wheel bundles librdkafka, no deps),
    # keeps its snapshot and history as numpy columns (numpy's wheel has no dependencies), and compresses
    # its text with zlib-ng (its wheel bundles the library, no dependencies).
    exporter_only = {
        name: constraints[name]
        for name in ("confluent-kafka", "numpy", "psycopg", "psycopg-binary", "typing-extensions", "zlib-ng")
    }
    for instructions, expected in ((jobs, {**shared, **jobs_only}), (exporter, {**shared, **exporter_only})):
        requirements = pip_requirements(instructions)
        assert {name: version for name, (version, _) in requirements.items()} == expected
        (install,) = [run for run in only(instructions, "RUN") if "pip install" in run.arguments]
        for flag in ("--require-hashes", "--no-deps", "--only-binary :all:", "--no-cache-dir"):
            assert flag in install.arguments
    exporter_requirements = pip_requirements(exporter)
    assert {name: pip_requirements(jobs)[name] for name in shared} == {
        name: exporter_requirements[name] for name in shared
    }


def test_jobs_image_layout_is_what_the_chart_submits() -> None:
    instructions = parse(JOBS_DOCKERFILE)
    copies = [copy.arguments for copy in only(instructions, "COPY") if not copy.heredoc]
    assert copies[0] == "jobs/ /opt/streamstack/app/jobs/"
    environment = " ".join(env.arguments for env in only(instructions, "ENV"))
    python_path = re.search(r"PYTHONPATH=(\S+)", environment)
    assert python_path and python_path.group(1).split(":") == ["/opt/streamstack/app", "/opt/streamstack/lib"]
    (install,) = [run for run in only(instructions, "RUN") if "pip install" in run.arguments]
    assert "--target /opt/streamstack/lib" in install.arguments
    template = (REPO_ROOT / "charts" / "streaming-job" / "templates" / "sparkapplication.yaml").read_text()
    assert "local:///opt/streamstack/app/jobs/%s/__main__.py" in template


def test_jobs_image_builds_the_jobs_jvm_jar_with_its_build_script() -> None:
    """The jar is compiled in the image by jobs/jvm/build.py (which names its place there), after the jobs are
    copied in, with the JDK of a Temurin image pinned to a Java 17 version, mounted for that step only."""
    instructions = parse(JOBS_DOCKERFILE)
    keywords = [instruction.keyword for instruction in instructions]
    (build,) = [run for run in only(instructions, "RUN") if "jobs.jvm.build" in run.arguments]
    assert "python3 -m jobs.jvm.build --image" in build.arguments
    mount = re.search(
        r"--mount=type=bind,from=(\S+?),source=/opt/java/openjdk,target=/opt/jdk", build.arguments
    )
    assert mount and re.fullmatch(
        r"eclipse-temurin:17\.0\.\d+_\d+-jdk-[a-z]+(@sha256:[0-9a-f]{64})?", mount.group(1)
    )
    assert "PATH=/opt/jdk/bin:" in build.arguments
    copy_jobs = next(
        i for i, x in enumerate(instructions) if x.arguments == "jobs/ /opt/streamstack/app/jobs/"
    )
    assert copy_jobs < instructions.index(build) < keywords.index("USER", copy_jobs)


def test_exporter_image_holds_only_the_exporter() -> None:
    instructions = parse(EXPORTER_DOCKERFILE)
    copies = [copy.arguments for copy in only(instructions, "COPY") if not copy.heredoc]
    assert copies[:2] == [
        "monitoring/__init__.py /app/monitoring/__init__.py",
        "monitoring/lag_exporter/ /app/monitoring/lag_exporter/",
    ]
    assert all(copy.split()[0].startswith("contracts/") for copy in copies[2:])
    (entrypoint,) = only(instructions, "ENTRYPOINT")
    assert entrypoint.arguments == '["python", "-m", "monitoring.lag_exporter"]'
    exposed = only(instructions, "EXPOSE")[0].arguments
    assert int(exposed) == chart_defaults("lag-exporter")["exporter"]["port"]  # type: ignore[index]


def test_dockerignore_sends_only_what_the_images_copy() -> None:
    patterns = [
        line
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert patterns[0] == "*"
    allowed = [pattern[1:] for pattern in patterns if pattern.startswith("!")]
    for dockerfile in (JOBS_DOCKERFILE, EXPORTER_DOCKERFILE):
        for copy in only(parse(dockerfile), "COPY"):
            if copy.heredoc:
                continue
            for source in copy.arguments.split()[:-1]:
                assert any(
                    source.startswith(prefix) or fnmatch.fnmatch(source, prefix) for prefix in allowed
                ), source
                assert (REPO_ROOT / source).exists()


@pytest.mark.slow
def test_checkov_passes_the_dockerfiles() -> None:
    checkov = runtimes.ensure_checkov(log=lambda line: print(line, file=sys.stderr))
    report = run_checkov(
        checkov,
        [
            "--framework",
            "dockerfile",
            "--file",
            str(JOBS_DOCKERFILE),
            "--file",
            str(EXPORTER_DOCKERFILE),
            "--file",
            str(CONNECT_DOCKERFILE),
        ],
    )
    assert_clean(report)
    skipped = sorted({check["check_id"] for check in report["results"]["skipped_checks"]})
    assert skipped == ["CKV_DOCKER_2", "CKV_DOCKER_4"]


def test_connect_image_is_strimzis_kafka_image_of_the_stacks_versions() -> None:
    """infra/connect/Dockerfile: the Kafka Connect runtime Strimzi runs for the pinned operator and Kafka
    version of both stacks, pinned by tag (and digest where it was resolved), non-root at the end."""
    text = CONNECT_DOCKERFILE.read_text()
    assert re.match(r"^# syntax=docker/dockerfile:\d+\.\d+\n", text)
    instructions = parse(CONNECT_DOCKERFILE)
    (base,) = only(instructions, "FROM")
    match = re.fullmatch(
        rf"quay\.io/strimzi/kafka:(\d+\.\d+\.\d+)-kafka-(\d+\.\d+\.\d+)(@sha256:{SHA256})?", base.arguments
    )
    assert match, base.arguments
    for stack in ("dev", "prod"):
        kafka = yaml.safe_load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())["config"][
            "streamstack:kafka"
        ]
        assert (match.group(1), match.group(2)) == (kafka["operatorChartVersion"], kafka["version"])
    assert instructions[-1].keyword == "USER"
    uid = instructions[-1].arguments.partition(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric uid, so that runAsNonRoot can verify it"
    assert not only(instructions, "COPY"), "the image copies nothing from the repository"


def test_connect_image_plugin_jars_are_the_locked_debezium_set() -> None:
    """One source for the Debezium plugin: the lock's "debezium" set, which the local Kafka Connect loads,
    is what the Connect image fetches, each jar with its sha256, into one plugin directory."""
    lock = runtimes.load_lock()
    locked = {
        (artifact.repository_path, artifact.sha256)
        for artifact in lock.maven
        if artifact.jar_set == "debezium"
    }
    assert any("debezium-connector-postgres" in path for path, _ in locked)
    baked = set()
    maven = re.escape(runtimes.DEFAULT_MAVEN_REPO)
    for instruction in only(parse(CONNECT_DOCKERFILE), "ADD"):
        match = re.fullmatch(
            rf"--checksum=sha256:({SHA256}) --chmod=644 {maven}/(\S+\.jar) "
            r"/opt/kafka/plugins/debezium-connector-postgres/",
            instruction.arguments,
        )
        assert match, instruction.arguments
        baked.add((match.group(2), match.group(1)))
    assert baked == locked


OWN_PACKAGES = ("contracts", "infra", "jobs", "monitoring", "streamstack")


def _copied_files(dockerfile: Path) -> set[Path]:
    """The repository files a Dockerfile's COPY instructions put into the image."""
    files: set[Path] = set()
    for copy in only(parse(dockerfile), "COPY"):
        if copy.heredoc:
            continue
        for source in copy.arguments.split()[:-1]:
            path = REPO_ROOT / source
            files |= set(path.rglob("*.py")) if path.is_dir() else {path}
    return files


def _own_imports(path: Path) -> set[str]:
    """Modules of this repository that a Python file imports (absolute imports only: the house style)."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        modules |= {name for name in names if name.split(".")[0] in OWN_PACKAGES}
    return modules


def _module_file(module: str) -> Path | None:
    base = REPO_ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None  # a name imported from a module, not a module


@pytest.mark.parametrize(
    "dockerfile", [JOBS_DOCKERFILE, EXPORTER_DOCKERFILE], ids=lambda path: path.parent.name
)
def test_every_module_the_image_imports_is_copied_into_it(dockerfile: Path) -> None:
    """An import of a package the image lacks fails only in the cluster: each copied file's own imports,
    and the packages' __init__ files on the way, must be copied too."""
    copied = _copied_files(dockerfile)
    missing = set()
    for path in copied:
        for module in _own_imports(path):
            parts = module.split(".")
            for depth in range(1, len(parts) + 1):
                needed = _module_file(".".join(parts[:depth]))
                if needed is not None and needed not in copied:
                    missing.add(f"{path.relative_to(REPO_ROOT)} imports {needed.relative_to(REPO_ROOT)}")
    assert sorted(missing) == []

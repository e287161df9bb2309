"""The kind workflow: actionlint (the pinned build from `streamstack setup`) finds nothing, every action and
tool is pinned, the steps are the ones README.md describes, in order, with teardown always, and the
producers it starts use the load-generator user and NetworkPolicy the dev stack defines."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamstack import runtimes
from streamstack.k8s_validation import validate_manifests
from streamstack.manifests import RenderedStack, render_stack
from streamstack.paths import REPO_ROOT

WORKFLOWS = sorted((REPO_ROOT / ".github" / "workflows").glob("*.y*ml"))
KIND_WORKFLOW = REPO_ROOT / ".github" / "workflows" / "kind.yaml"


@pytest.fixture(scope="module")
def actionlint() -> Path:
    return runtimes.ensure_go_tools(log=lambda line: print(line, file=sys.stderr))["actionlint"]


@pytest.fixture(scope="module")
def workflow() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(KIND_WORKFLOW.read_text())
    return loaded


def steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = workflow["jobs"]["kind"]["steps"]
    return found


def test_actionlint_is_the_pinned_version(actionlint: Path) -> None:
    result = subprocess.run(
        [str(actionlint), "-version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0
    assert result.stdout.splitlines()[0] == "v1.7.12"


@pytest.mark.parametrize("path", WORKFLOWS, ids=[path.name for path in WORKFLOWS])
def test_actionlint_finds_nothing(actionlint: Path, path: Path) -> None:
    result = subprocess.run(
        [str(actionlint), "-color=false", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO_ROOT,
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_actionlint_catches_a_broken_workflow(actionlint: Path, tmp_path: Path) -> None:
    broken = tmp_path / ".github" / "workflows" / "broken.yaml"
    broken.parent.mkdir(parents=True)
    broken.write_text(
        KIND_WORKFLOW.read_text().replace("runs-on: ubuntu-24.04", "runs-on: ubuntu-24.04\n    timeout: 5")
    )
    result = subprocess.run(
        [str(actionlint), "-color=false", str(broken)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert 'unexpected key "timeout"' in result.stdout


def test_actions_are_pinned_by_commit(workflow: dict[str, Any]) -> None:
    text = KIND_WORKFLOW.read_text()
    uses = re.findall(r"uses: (\S+)(.*)", text)
    assert uses
    for action, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", action), action
        assert re.fullmatch(r" # v\d+\.\d+\.\d+", comment), f"{action}: name the release in a comment"


def test_tools_and_images_are_pinned(workflow: dict[str, Any]) -> None:
    env = workflow["env"]
    assert re.fullmatch(r"v\d+\.\d+\.\d+", env["KIND_VERSION"])
    assert re.fullmatch(r"kindest/node:v\d+\.\d+\.\d+@sha256:[0-9a-f]{64}", env["KIND_NODE_IMAGE"])
    assert env["KUBECTL_VERSION"] == env["KIND_NODE_IMAGE"].split(":")[1].split("@")[0]
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert f"pulumi=={env['PULUMI_VERSION']}" in pyproject["project"]["dependencies"]
    for variable, chart in (("JOBS_IMAGE", "streaming-job"), ("EXPORTER_IMAGE", "lag-exporter")):
        values = yaml.safe_load((REPO_ROOT / "charts" / chart / "values.yaml").read_text())
        app_version = yaml.safe_load((REPO_ROOT / "charts" / chart / "Chart.yaml").read_text())["appVersion"]
        assert env[variable] == f"{values['image']['repository']}:{app_version}"


def test_steps_follow_the_readme(workflow: dict[str, Any]) -> None:
    runs = [step.get("run", "") for step in steps(workflow)]
    script = "\n".join(runs)
    order = [
        "kind create cluster",
        "docker build --file jobs/Dockerfile",
        "docker build --file monitoring/Dockerfile",
        "kind load docker-image",
        "pulumi up --stack dev --yes",
        "loadGeneratorSecret",
        "jobs.producers.$1",
        "streamstack_query_batch_utilization",
        "streamstack_lag_group_max_seconds",
        "kubectl get sparkapplications,kafkatopics -A",
        "kind delete cluster",
    ]
    positions = [script.find(fragment) for fragment in order]
    assert -1 not in positions, dict(zip(order, positions, strict=True))
    assert positions == sorted(positions)
    assert 'pulumi login "file://' in script  # a local backend, no Pulumi Cloud account
    readme = (REPO_ROOT / "README.md").read_text()
    for fragment in (
        "kind create cluster",
        "kind load docker-image",
        "pulumi up --stack dev",
        "kind delete cluster",
    ):
        assert fragment in readme


def test_teardown_always_runs_last(workflow: dict[str, Any]) -> None:
    last = steps(workflow)[-1]
    assert last["if"] == "always()"
    assert "kind delete cluster" in last["run"]
    assert workflow["permissions"] == {"contents": "read"}
    (checkout,) = [step for step in steps(workflow) if step.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"]["persist-credentials"] is False


STUB_KUBECTL = """#!/usr/bin/env bash
# Records what the workflow applies; `wait` succeeds.
case "$*" in
  *"apply"*"-f -"*) { cat; printf '\\n---\\n'; } >> "$APPLIED" ;;
esac
"""
STUB_PULUMI = """#!/usr/bin/env bash
case "$*" in
  *"stack output"*"kafkaBootstrapServers"*) printf streamstack-kafka-bootstrap.kafka.svc:9092 ;;
  *"stack output"*"loadGeneratorSecret"*) printf load-generator ;;
  *) exit 1 ;;
esac
"""
SCRAM_JAAS_LINE = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'
)


@pytest.fixture(scope="module")
def dev_stack() -> RenderedStack:
    return render_stack("dev")


def run_produce_step(workflow: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    """The "Produce events" step with kubectl and pulumi stubbed: what it applies."""
    (step,) = [step for step in steps(workflow) if step.get("name", "").startswith("Produce events")]
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, body in (("kubectl", STUB_KUBECTL), ("pulumi", STUB_PULUMI)):
        (stubs / name).write_text(body)
        (stubs / name).chmod(0o755)
    applied = tmp_path / "applied.yaml"
    environment = {
        **{key: str(value) for key, value in workflow["env"].items()},
        "PATH": f"{stubs}:/usr/bin:/bin",
        "APPLIED": str(applied),
    }
    result = subprocess.run(
        ["bash", "-c", step["run"]], env=environment, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    manifests = [document for document in yaml.safe_load_all(applied.read_text()) if document]
    for manifest in manifests:
        manifest["metadata"].setdefault("namespace", workflow["env"]["JOBS_NAMESPACE"])
    return manifests


def test_the_producers_the_workflow_starts_are_valid_and_take_their_flags(
    workflow: dict[str, Any], tmp_path: Path
) -> None:
    """The pods the step applies are valid, restricted, and each producer parses its command and reads its
    credentials from the environment as the jobs do."""
    from jobs.common.config import KafkaSecurity  # noqa: PLC0415 - the jobs' own reader of these variables

    manifests = run_produce_step(workflow, tmp_path)
    assert sorted(manifest["kind"] for manifest in manifests) == ["Pod", "Pod", "Pod"]
    assert validate_manifests(manifests, kubernetes_version=workflow["env"]["KUBECTL_VERSION"]) == []
    for pod in manifests:
        (container,) = pod["spec"]["containers"]
        command = container["command"]
        assert command[:3] == [
            "python3",
            "-m",
            f"jobs.producers.{pod['metadata']['name'].removeprefix('load-')}",
        ]
        assert container["image"] == workflow["env"]["JOBS_IMAGE"]
        arguments = importlib.import_module(command[2]).parse_args(command[3:])
        assert arguments.bootstrap_servers == "streamstack-kafka-bootstrap.kafka.svc:9092"
        environment = {item["name"]: item.get("value", SCRAM_JAAS_LINE) for item in container["env"]}
        assert KafkaSecurity.from_environment(environment).security_protocol == "SASL_PLAINTEXT"
        # The jobs' namespace enforces the Pod Security "restricted" level.
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }


def test_the_producers_use_the_stacks_load_generator_user_and_network_policy(
    workflow: dict[str, Any], tmp_path: Path, dev_stack: RenderedStack
) -> None:
    """The KafkaUser and NetworkPolicy live in the stack now (not in the workflow): the pods the workflow
    starts use that user's Secret, its ACLs allow exactly the topics they write, and its policy selects them
    and lets them reach the bootstrap port."""
    script = "\n".join(step.get("run", "") for step in steps(workflow))
    assert "kind: KafkaUser" not in script
    manifests = run_produce_step(workflow, tmp_path)
    outputs = dev_stack.outputs
    assert {pod["metadata"]["namespace"] for pod in manifests} == {outputs["jobsNamespace"]}
    (user,) = dev_stack.find("KafkaUser", outputs["loadGeneratorSecret"])
    assert user["metadata"]["namespace"] == outputs["jobsNamespace"]
    acls = user["spec"]["authorization"]["acls"]
    writable = {acl["resource"]["name"] for acl in acls if "Write" in acl["operations"]}
    (policy,) = [
        policy
        for policy in dev_stack.find("NetworkPolicy", "load-generator")
        if policy["metadata"]["namespace"] == outputs["jobsNamespace"]
    ]
    bootstrap_port = int(outputs["kafkaBootstrapServers"].rsplit(":", 1)[1])
    assert bootstrap_port in [port["port"] for rule in policy["spec"]["egress"] for port in rule["ports"]]
    written: set[str] = set()
    for pod in manifests:
        assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        (container,) = pod["spec"]["containers"]
        references = [item["valueFrom"]["secretKeyRef"] for item in container["env"] if "valueFrom" in item]
        assert references == [{"name": outputs["loadGeneratorSecret"], "key": "sasl.jaas.config"}]
        arguments = importlib.import_module(container["command"][2]).parse_args(container["command"][3:])
        for option in ("topic", "clicks_topic", "orders_topic"):
            if getattr(arguments, option, None):
                written.add(getattr(arguments, option))
    # The user may write what the producers write, and nothing more.
    assert written == writable == set(outputs["loadGeneratorTopics"])
    assert not [acl for acl in acls if {"Read", "Alter", "Delete", "All"} & set(acl["operations"])]

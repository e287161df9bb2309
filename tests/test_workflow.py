"""The kind workflow: actionlint (the pinned build from `streamstack setup`) finds nothing, every action and
tool is pinned, the steps are the ones README.md describes, in order, with teardown always, and the
producers it starts use the load-generator user and NetworkPolicy the dev stack defines.

Its pulumi steps, and README.md's kind block, run as on a fresh runner or laptop against a stand-in for the
Pulumi CLI that needs what the real one needs (tests/pulumi_cli_stub.py: a state folder that exists, a stack
created before `up`, a passphrase), and both do the same to the backend and the stack."""

from __future__ import annotations

import importlib
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.pipeline import load_pipeline
from streamstack import runtimes
from streamstack.paths import REPO_ROOT
from streamstack.render import RenderedStack, render_stack
from streamstack.render.validate import validate_manifests

WORKFLOWS = sorted((REPO_ROOT / ".github" / "workflows").glob("*.y*ml"))
KIND_WORKFLOW = REPO_ROOT / ".github" / "workflows" / "kind.yaml"
README = REPO_ROOT / "README.md"


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
        "loadGeneratorCommands",
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


# What the kind steps ask kubectl for the stack's address settings (as the stub sees its arguments), and the
# addresses the stub answers: different ones, so that each lands in its own setting.
KIND_ADDRESS_QUERIES = {
    "apiServerCidrs": "get endpointslices -n default -l kubernetes.io/service-name=kubernetes -o "
    "jsonpath={.items[0].endpoints[0].addresses[0]}",
    "nodeCidrs": 'get nodes -o jsonpath={.items[0].status.addresses[?(@.type=="InternalIP")].address}',
}
KIND_API_SERVER_IP = "172.18.0.7"
KIND_NODE_IP = "172.18.0.9"
# Stand-ins for the tools the workflow's and README's steps call. `pulumi` is tests/pulumi_cli_stub.py, which
# keeps the real CLI's state and refuses what the real CLI refuses (a login to a folder that does not exist, a
# stack never created, no passphrase); the others succeed and record what they were asked.
PULUMI_STUB = REPO_ROOT / "tests" / "pulumi_cli_stub.py"
STUB_KUBECTL = f"""#!/usr/bin/env bash
# Records what the workflow applies; `wait` succeeds; answers the two address queries as a one-node kind
# cluster would (the API server's endpoint, the node's InternalIP), to nothing else.
printf 'kubectl %s\\n' "$*" >> "$COMMANDS"
case "$*" in
  *"apply"*"-f -"*) {{ cat; printf '\\n---\\n'; }} >> "$APPLIED" ;;
  {shlex.quote(KIND_ADDRESS_QUERIES["apiServerCidrs"])}) printf '{KIND_API_SERVER_IP}' ;;
  {shlex.quote(KIND_ADDRESS_QUERIES["nodeCidrs"])}) printf '{KIND_NODE_IP}' ;;
  *"get endpoints"* | *"get nodes"*) echo "kubectl stub: unexpected query: $*" >&2; exit 1 ;;
esac
"""
STUB_RECORDER = """#!/usr/bin/env bash
printf '%s %s\\n' "$(basename "$0")" "$*" >> "$COMMANDS"
"""
RECORDED_TOOLS = ("kind", "docker", "go", "make")
SCRAM_JAAS_LINE = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'
)
# GitHub's `run` shell on Linux (`shell: bash`, the default when bash is there).
RUN_SHELL = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]
PULUMI_COMMAND = re.compile(r"^\s*pulumi\s|\$\(pulumi\s", re.MULTILINE)
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@pytest.fixture(scope="module")
def dev_stack() -> RenderedStack:
    return render_stack("dev")


@dataclass(frozen=True)
class Workspace:
    """A fresh checkout on a fresh machine: the project files, an empty home and runner temp, the stubs."""

    root: Path

    @property
    def project(self) -> Path:
        return self.root / "checkout"

    @property
    def applied(self) -> Path:
        return self.root / "applied.yaml"

    @property
    def pulumi_log(self) -> Path:
        return self.root / "pulumi.log"

    def environment(self) -> dict[str, str]:
        """What a fresh runner or shell has: no PULUMI_* variable, no Pulumi login, nothing inherited."""
        return {
            "PATH": f"{self.root / 'bin'}:/usr/bin:/bin",
            "HOME": str(self.root / "home"),
            "PULUMI_HOME": str(self.root / "home" / ".pulumi"),
            "RUNNER_TEMP": str(self.root / "runner-temp"),
            "GITHUB_ENV": str(self.root / "github-env"),
            "GITHUB_PATH": str(self.root / "github-path"),
            "APPLIED": str(self.applied),
            "COMMANDS": str(self.root / "commands.log"),
            "PULUMI_STUB_LOG": str(self.pulumi_log),
            "PULUMI_STUB_OUTPUTS": str(self.root / "outputs.json"),
        }

    def pulumi_calls(self) -> list[dict[str, Any]]:
        text = self.pulumi_log.read_text() if self.pulumi_log.exists() else ""
        return [json.loads(line) for line in text.splitlines()]

    def applied_manifests(self, namespace: str) -> list[dict[str, Any]]:
        manifests = [document for document in yaml.safe_load_all(self.applied.read_text()) if document]
        for manifest in manifests:
            manifest["metadata"].setdefault("namespace", namespace)
        return manifests


def make_workspace(root: Path, outputs: dict[str, Any]) -> Workspace:
    """`outputs`: what `pulumi up` leaves as the stack's outputs (those `streamstack render` computes)."""
    workspace = Workspace(root)
    workspace.project.mkdir(parents=True)
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):  # as the checkout has them
        shutil.copy2(REPO_ROOT / name, workspace.project / name)
    for directory in ("home", "runner-temp", "bin"):
        (root / directory).mkdir()
    for path in ("github-env", "github-path", "commands.log"):
        (root / path).touch()
    (root / "outputs.json").write_text(json.dumps(outputs))
    stubs = {
        "pulumi": f'#!/bin/sh\nexec "{sys.executable}" "{PULUMI_STUB}" "$@"\n',
        "kubectl": STUB_KUBECTL,
        **dict.fromkeys(RECORDED_TOOLS, STUB_RECORDER),
    }
    for name, body in stubs.items():
        (root / "bin" / name).write_text(body)
        (root / "bin" / name).chmod(0o755)
    return workspace


@dataclass(frozen=True)
class StepResult:
    name: str
    returncode: int
    output: str


def github_env(path: Path) -> dict[str, str]:
    """The variables steps wrote to $GITHUB_ENV (`NAME=value` and `NAME<<DELIMITER` blocks)."""
    variables: dict[str, str] = {}
    lines = iter(path.read_text().splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            value = []
            for body in lines:
                if body == delimiter:
                    break
                value.append(body)
            variables[name] = "\n".join(value)
        elif "=" in line:
            name, value_text = line.split("=", 1)
            variables[name] = value_text
    return variables


def resolve_expressions(value: str) -> str:
    """`${{ secrets.X }}` as GitHub resolves it where the secret is not set (a fork's pull request, a
    repository without it): empty. Any other expression is not emulated here."""

    def resolve(match: re.Match[str]) -> str:
        assert match.group(1).startswith("secrets."), f"cannot emulate the expression {match.group(0)}"
        return ""

    return EXPRESSION.sub(resolve, value)


def run_steps(workflow: dict[str, Any], workspace: Workspace) -> list[StepResult]:
    """The workflow's steps that run `pulumi` or set the job's environment, in order, as the runner runs
    them: each in its own shell in the checkout, with the workflow's env, what earlier steps wrote to
    $GITHUB_ENV and the step's own env; after a failure only `if: always()` steps run."""
    results: list[StepResult] = []
    failed = False
    for step in steps(workflow):
        script = step.get("run", "")
        if not (PULUMI_COMMAND.search(script) or "GITHUB_ENV" in script):
            continue
        condition = step.get("if", "success()")
        if (failed and condition != "always()") or (not failed and condition == "failure()"):
            continue
        assert "${{" not in script, f"{step['name']}: expressions in a script are not emulated"
        environment = {
            **workspace.environment(),
            **{key: str(value) for key, value in workflow["env"].items()},
            **github_env(Path(workspace.environment()["GITHUB_ENV"])),
            **{key: resolve_expressions(str(value)) for key, value in step.get("env", {}).items()},
        }
        result = subprocess.run(
            [*RUN_SHELL, "-c", script],
            env=environment,
            cwd=workspace.project,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        results.append(StepResult(step["name"], result.returncode, result.stdout + result.stderr))
        failed = failed or result.returncode != 0
    return results


def readme_kind_block() -> str:
    """The first bash block of README.md's "On a laptop with Docker and kind" section."""
    section = README.read_text().split("## On a laptop with Docker and kind", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert match, "README.md: no bash block in the kind section"
    return match.group(1)


def pulumi_sequence(calls: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """What a script does to the backend and the stack, comparable between two scripts: the login (its
    scheme), the stack it creates or selects, and the stacks it updates."""
    sequence: list[tuple[str, ...]] = []
    for call in calls:
        match call["argv"]:
            case ["login", url]:
                sequence.append(("login", url.split("://", 1)[0]))
            case ["stack", "select", name, "--create"] | ["stack", "init", name]:
                sequence.append(("create or select stack", name))
            case ["config", "set", *arguments]:
                sequence.append(("config set", *sorted(arguments)))
            case ["up", *options]:
                stack = options[options.index("--stack") + 1] if "--stack" in options else "(selected)"
                sequence.append(("up", stack))
    return sequence


@pytest.fixture(scope="module")
def workflow_run(
    workflow: dict[str, Any], dev_stack: RenderedStack, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Workspace, list[StepResult]]:
    workspace = make_workspace(tmp_path_factory.mktemp("workflow"), dev_stack.outputs)
    return workspace, run_steps(workflow, workspace)


def test_the_workflows_pulumi_steps_run_on_a_fresh_runner(
    workflow_run: tuple[Workspace, list[StepResult]],
) -> None:
    """Every step that runs `pulumi` succeeds against a CLI that needs what the real one needs: a state
    folder that exists before `pulumi login`, a stack created before `up`, a passphrase for its secrets
    (generated when the repository has no PULUMI_CONFIG_PASSPHRASE secret), the same one for every command.
    The teardown's `|| true` must not hide a failing `destroy` either: every call succeeded."""
    workspace, results = workflow_run
    names = [result.name for result in results]
    assert any(name.startswith("pulumi up") for name in names), names
    assert any(name == "Tear down" for name in names), names
    for result in results:
        assert result.returncode == 0, f"{result.name}:\n{result.output}"
    calls = workspace.pulumi_calls()
    assert [call for call in calls if call["status"] != 0] == []
    assert [call["argv"][0] for call in calls][-1] == "destroy"
    address_settings = [
        ("config set", "--path", "--stack", f"{address}/32", "dev", f"streamstack:cluster.{setting}[0]")
        for setting, address in (("apiServerCidrs", KIND_API_SERVER_IP), ("nodeCidrs", KIND_NODE_IP))
    ]
    assert pulumi_sequence(calls) == [
        ("login", "file"),
        ("create or select stack", "dev"),
        *address_settings,
        # The CDC database password, made for the run and given on stdin (never on a command line).
        ("config set", "--secret", "--stack", "cdcDatabasePassword", "dev"),
        ("up", "dev"),
    ]


def test_the_workflow_admits_its_clusters_api_server_and_node_by_address(
    workflow_run: tuple[Workspace, list[StepResult]],
) -> None:
    """The steps set `cluster.apiServerCidrs` and `cluster.nodeCidrs` from what kubectl reports for the kind
    cluster, in the stack file `pulumi up` reads: the program accepts them, and the rendered NetworkPolicies
    reach the API server and the node at exactly those addresses, at no other address block."""
    workspace, _ = workflow_run
    rendered = render_stack("dev", project_dir=workspace.project, program_dir=REPO_ROOT / "infra")
    blocks: dict[tuple[int, ...], set[str]] = {}
    for policy in rendered.find("NetworkPolicy"):
        for direction, peers_key in (("egress", "to"), ("ingress", "from")):
            for rule in policy["spec"].get(direction) or []:
                ports = tuple(sorted({port["port"] for port in rule.get("ports") or []}))
                for peer in rule.get(peers_key) or []:
                    if "ipBlock" in peer:
                        blocks.setdefault(ports, set()).add(peer["ipBlock"]["cidr"])
    assert blocks[(443, 6443)] == {f"{KIND_API_SERVER_IP}/32"}  # API egress
    assert blocks[(10250,)] == {f"{KIND_API_SERVER_IP}/32"}  # the API server calls the operator's webhook
    assert blocks[(9100, 10250)] == {f"{KIND_NODE_IP}/32"}  # Prometheus scrapes the kubelet, node-exporter


def test_readme_kind_steps_run_the_same_pulumi_sequence_as_the_workflow(
    workflow_run: tuple[Workspace, list[StepResult]], dev_stack: RenderedStack, tmp_path: Path
) -> None:
    """README.md's kind block, pasted into a fresh shell (tools stubbed, `pulumi` as strict as the real CLI),
    succeeds and does to the backend and the stack what the workflow does."""
    workspace = make_workspace(tmp_path, dev_stack.outputs)
    block = readme_kind_block()
    result = subprocess.run(
        [*RUN_SHELL, "-c", block],
        env=workspace.environment(),
        cwd=workspace.project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"README.md's kind block failed:\n{block}\n{result.stdout}{result.stderr}"
    readme = pulumi_sequence(workspace.pulumi_calls())
    assert readme == pulumi_sequence(workflow_run[0].pulumi_calls())
    assert [call for call in workspace.pulumi_calls() if call["status"] != 0] == []


PREPARED = 'mkdir -p state && pulumi login "file://$PWD/state"'


@pytest.mark.parametrize(
    ("script", "refusal"),
    [
        ('pulumi login "file://$PWD/state"', "problem logging in: unable to open bucket file://"),
        ("pulumi up --stack dev --yes", "PULUMI_ACCESS_TOKEN must be set"),
        (f"{PREPARED} && pulumi stack select dev", "no stack named 'dev' found"),
        (f"{PREPARED} && pulumi up --stack dev --yes", "no stack named 'dev' found"),
        (  # the address settings before the stack exists
            f"{PREPARED} && pulumi config set --stack dev --path 'cluster.apiServerCidrs[0]' 172.18.0.2/32",
            "no stack named 'dev' found",
        ),
        (  # an index past the end of the list
            f"{PREPARED} && export PULUMI_CONFIG_PASSPHRASE=one && pulumi stack select dev --create"
            " && pulumi config set --stack dev --path 'cluster.apiServerCidrs[2]' 172.18.0.2/32",
            "out of range",
        ),
        (f"{PREPARED} && pulumi stack select dev --create", "passphrase must be set"),
        (
            f"{PREPARED} && PULUMI_CONFIG_PASSPHRASE=one pulumi stack select dev --create"
            " && PULUMI_CONFIG_PASSPHRASE=two pulumi up --stack dev --yes",
            "incorrect passphrase",
        ),
        (
            f"{PREPARED} && export PULUMI_CONFIG_PASSPHRASE=one && pulumi stack init dev"
            " && pulumi up --stack dev",
            "--yes or --skip-preview must be passed",
        ),
        (  # a salt committed from someone's own passphrase
            f"printf 'encryptionsalt: v1:c2FsdA==:v1:bm9uY2U=:ZGF0YQ==\\n' >> Pulumi.dev.yaml && {PREPARED}"
            " && PULUMI_CONFIG_PASSPHRASE=generated pulumi stack select dev --create",
            "incorrect passphrase",
        ),
        (
            f'{PREPARED} && cd "$HOME" && pulumi stack select dev --create',
            "no Pulumi.yaml project file found",
        ),
    ],
)
def test_the_pulumi_stand_in_refuses_what_the_real_cli_refuses(
    script: str, refusal: str, tmp_path: Path
) -> None:
    """The stand-in is only worth running the workflow against if it is as strict as the real CLI."""
    workspace = make_workspace(tmp_path, {})
    result = subprocess.run(
        [*RUN_SHELL, "-c", script],
        env=workspace.environment(),
        cwd=workspace.project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert refusal in result.stderr, result.stderr


def produced_pods(workflow: dict[str, Any], run: tuple[Workspace, list[StepResult]]) -> list[dict[str, Any]]:
    """What the "Produce events" step applied, after the steps before it ran (its `pulumi stack output`
    calls answered from the stack the "pulumi up" step deployed)."""
    workspace, results = run
    (produce,) = [result for result in results if result.name.startswith("Produce events")]
    assert produce.returncode == 0, produce.output
    return workspace.applied_manifests(workflow["env"]["JOBS_NAMESPACE"])


def test_the_producers_the_workflow_starts_are_valid_and_take_their_flags(
    workflow: dict[str, Any], workflow_run: tuple[Workspace, list[StepResult]], dev_stack: RenderedStack
) -> None:
    """The pods the step applies are valid, restricted, and each producer parses its command and reads its
    credentials from the environment as the jobs do."""
    from contracts.kafka_security import KafkaSecurity  # noqa: PLC0415 - the jobs' own reader of these variables

    manifests = produced_pods(workflow, workflow_run)
    assert [manifest["kind"] for manifest in manifests] == ["Pod"] * len(load_pipeline().producers)
    assert validate_manifests(manifests, kubernetes_version=workflow["env"]["KUBECTL_VERSION"]) == []
    for pod in manifests:
        (container,) = pod["spec"]["containers"]
        command = container["command"]
        producer = load_pipeline().producer(pod["metadata"]["name"].removeprefix("load-"))
        assert command[:5] == ["python3", "-m", producer.module, "--topic", producer.topic]
        assert container["image"] == workflow["env"]["JOBS_IMAGE"]
        arguments = importlib.import_module(command[2]).parse_args(command[3:])
        assert arguments.bootstrap_servers == dev_stack.outputs["kafkaBootstrapServers"]
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
    workflow: dict[str, Any], workflow_run: tuple[Workspace, list[StepResult]], dev_stack: RenderedStack
) -> None:
    """The KafkaUser and NetworkPolicy live in the stack now (not in the workflow): the pods the workflow
    starts use that user's Secret, its ACLs allow exactly the topics they write, and its policy selects them
    and lets them reach the bootstrap port."""
    script = "\n".join(step.get("run", "") for step in steps(workflow))
    assert "kind: KafkaUser" not in script
    manifests = produced_pods(workflow, workflow_run)
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

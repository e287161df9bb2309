"""The stack secret `streamstack:grafanaAdminPassword`: read only as a Pulumi secret, it becomes a Secret in
the monitoring namespace that Grafana's chart takes its admin credentials from; unset, the chart generates
a password; set in plain text, the program fails naming the setting; `streamstack render` never writes it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from google.protobuf import json_format
from pulumi.runtime import rpc

from infra import config as stack_config
from infra.components.monitoring import Monitoring, MonitoringArgs
from infra.config import ConfigError, MonitoringConfig
from streamstack.paths import REPO_ROOT
from streamstack.render import SECRET_PLACEHOLDER, ProgramError, load_project, render_stack
from streamstack.render import stack_config as rendered_stack_config
from streamstack.render import validate as k8s_validation
from tests.infra.conftest import Recorded, Stack, build, run_program

KEY = "grafanaAdminPassword"
PASSWORD = "correct-horse-battery-staple-7f3a"
OWN_SECRET = "kube-prometheus-stack-grafana-admin"
CHART_SECRET = "kube-prometheus-stack-grafana"  # what the grafana sub-chart generates
ADMIN_VALUES = {"existingSecret": OWN_SECRET, "userKey": "admin-user", "passwordKey": "admin-password"}


def wire_inputs(stack: Stack, resource: Recorded) -> dict[str, Any]:
    """The inputs as the engine receives them (and keeps them in the state), secret markers included."""
    request, _ = stack.monitor.requests[(resource.typ, resource.name)]
    inputs: dict[str, Any] = json_format.MessageToDict(request.object)
    return inputs


def is_marked_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


def monitoring_release(stack: Stack) -> Recorded:
    return stack.by_logical_name("monitoring-kube-prometheus-stack")


def test_a_secret_password_becomes_a_monitoring_secret_that_grafana_uses(
    mocked: Callable[[str], Stack],
) -> None:
    stack = run_program(mocked, "dev", strings={KEY: PASSWORD}, secret_keys=[KEY])
    secret = stack.named("Secret", OWN_SECRET)
    assert secret.metadata["namespace"] == "monitoring"
    string_data = wire_inputs(stack, secret)["stringData"]
    assert is_marked_secret(string_data), string_data
    assert string_data["value"] == {"admin-user": "admin", "admin-password": PASSWORD}
    release = monitoring_release(stack)
    values = release.inputs["values"]
    assert values["grafana"]["admin"] == ADMIN_VALUES
    assert PASSWORD not in str(values)
    assert secret.urn in release.dependencies
    assert stack.named("Namespace", "monitoring").urn in secret.dependencies
    assert k8s_validation.check_chart_values("kube-prometheus-stack", values) == []
    assert stack.exports[KEY] == (
        f"kubectl get secret -n monitoring {OWN_SECRET} -o jsonpath='{{.data.admin-password}}' | base64 -d"
    )


def test_without_the_secret_the_chart_generates_the_password_and_no_secret_is_created(
    mocked: Callable[[str], Stack],
) -> None:
    stack = run_program(mocked, "dev")
    # Only the Alertmanager's routing (tests/infra/test_alerting.py), no Grafana admin Secret.
    assert [s.metadata["name"] for s in stack.of_kind("Secret")] == [
        "alertmanager-kube-prometheus-stack-alertmanager"
    ]
    values = monitoring_release(stack).inputs["values"]
    assert "admin" not in values["grafana"]
    assert "adminPassword" not in values["grafana"]
    assert stack.exports[KEY] == (
        f"kubectl get secret -n monitoring {CHART_SECRET} -o jsonpath='{{.data.admin-password}}' | base64 -d"
    )


def test_a_plain_text_password_fails_naming_the_setting_and_the_secret_command(
    mocked: Callable[[str], Stack],
) -> None:
    with pytest.raises(ConfigError) as error:
        run_program(mocked, "dev", strings={KEY: PASSWORD})
    message = str(error.value)
    assert message.startswith(f"streamstack:{KEY}:"), message
    assert f"pulumi config set --secret {KEY}" in message
    assert PASSWORD not in message


def test_the_password_is_a_pulumi_secret_from_config_to_the_secret_object(
    mocked: Callable[[str], Stack], tmp_path: Path
) -> None:
    stack = mocked("dev")
    pulumi.runtime.set_all_config({f"streamstack:{KEY}": PASSWORD}, [f"streamstack:{KEY}"])
    secrecy: dict[str, bool] = {}

    def program() -> object:
        password = stack_config.grafana_admin_password()
        assert password is not None
        args = MonitoringArgs(
            monitoring=MonitoringConfig(),
            scrape_ports=(),
            rules_dir=tmp_path,
            dashboards_dir=tmp_path,
            grafana_admin_password=password,
        )
        admin = Monitoring("monitoring", args).grafana_admin
        assert admin is not None

        async def check() -> None:
            secrecy["config value"] = await password.is_secret()
            secrecy["stringData"] = await admin.string_data.is_secret()

        return check()

    build(program)
    assert secrecy and all(secrecy.values()), secrecy
    assert is_marked_secret(wire_inputs(stack, stack.named("Secret", OWN_SECRET))["stringData"])


def test_render_writes_the_secret_object_but_never_the_password(tmp_path: Path) -> None:
    """`streamstack render` of a dev stack whose file holds the password as `pulumi config set --secret`
    writes it: the value the program receives for it appears in no written file."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        yaml.safe_dump({"name": "streamstack", "runtime": "python", "main": str(REPO_ROOT / "infra")})
    )
    ciphertext = "v1:Zm9yLXRlc3Rpbmc6bm90LWEtcmVhbC1rZXk="
    dev = yaml.safe_load((REPO_ROOT / "Pulumi.dev.yaml").read_text(encoding="utf-8"))
    dev["config"][f"streamstack:{KEY}"] = {"secure": ciphertext}
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump(dev))
    config, secret_keys = rendered_stack_config(load_project(project), "dev")
    received = config[f"streamstack:{KEY}"]  # what the program gets for the secret under render
    assert secret_keys == [f"streamstack:{KEY}"] and received

    out = tmp_path / "out"
    render = ["render", "--stack", "dev", "--out", str(out), "--validate", "--project-dir", str(project)]
    result = subprocess.run(
        [sys.executable, "-m", "streamstack.cli", *render],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    written = [path for path in out.rglob("*") if path.is_file()]
    assert len(written) > 50
    for path in written:
        text = path.read_text(encoding="utf-8")
        assert received not in text and ciphertext not in text, path
    assert received not in result.stdout + result.stderr
    secret = yaml.safe_load((out / "manifests" / f"secret-monitoring-{OWN_SECRET}.yaml").read_text())
    assert secret["stringData"] == {"admin-user": SECRET_PLACEHOLDER, "admin-password": SECRET_PLACEHOLDER}
    values = yaml.safe_load((out / "helm" / "kube-prometheus-stack" / "values.yaml").read_text())
    assert values["grafana"]["admin"] == ADMIN_VALUES


def test_render_of_a_plain_text_password_fails_naming_the_setting() -> None:
    with pytest.raises(ProgramError) as error:
        render_stack("dev", overrides={KEY: PASSWORD})
    message = str(error.value)
    assert f"streamstack:{KEY}: set in plain text" in message and f"--secret {KEY}" in message
    assert PASSWORD not in message


@pytest.mark.parametrize("blank", ["", "   "])
def test_an_empty_password_fails_naming_the_setting(mocked: Callable[[str], Stack], blank: str) -> None:
    with pytest.raises(ConfigError) as error:
        run_program(mocked, "dev", strings={KEY: blank}, secret_keys=[KEY])
    assert str(error.value).startswith(f"streamstack:{KEY}: empty;"), error.value

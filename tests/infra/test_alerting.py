"""Where alerts go: the Alertmanager configuration the program deploys for dev and prod (infra/alertmanager.py
from `streamstack:alerting` and the notifiers' secrets), checked by the real amtool 0.25: `check-config`, and
`config routes test` for every alert of monitoring/rules by its severity. The notifiers' URLs and keys are
Pulumi secrets end to end and never reach the chart's values; a plain-text one fails naming the setting."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import alertmanager
from infra.config import NOTIFIER_SECRETS, ConfigError
from streamstack.render import SECRET_PLACEHOLDER, load_project, render_stack, write_rendered
from streamstack.render import stack_config as rendered_stack_config
from streamstack.render import validate as k8s_validation
from streamstack.runtimes import Runtimes
from tests.infra.conftest import Stack, load_config, run_program
from tests.infra.test_secrets import is_marked_secret, monitoring_release, wire_inputs

# Stand-ins, handed to the program as `pulumi config set --secret` would.
FAKE = {
    "webhook": "https://alerts.example.test/streamstack/hook-5e1f",
    "slack": "https://hooks.slack.com/services/T0000/B0000/fake-slack-token-91c2",
    "pagerduty": "fakepagerdutyroutingkey0123456789",
}
# The Secret the Prometheus Operator reads for the chart's Alertmanager `kube-prometheus-stack-alertmanager`.
CONFIG_SECRET = "alertmanager-kube-prometheus-stack-alertmanager"
RULES_DIR = Path(__file__).resolve().parents[2] / "monitoring" / "rules"


def secrets_for(stack: str) -> dict[str, str]:
    """The stack setting -> fake value for every notifier the stack file routes to."""
    alerting = load_config(stack).alerting
    return {NOTIFIER_SECRETS[notifier]: FAKE[notifier] for notifier in alerting.notifiers}


def deploy(mocked: Callable[[str], Stack], stack: str) -> tuple[Stack, dict[str, Any], str]:
    """Run the program with the stack's notifier secrets: (what it registered, the Secret's wire stringData,
    the alertmanager.yaml it holds)."""
    secrets = secrets_for(stack)
    recorded = run_program(mocked, stack, strings=secrets, secret_keys=list(secrets))
    string_data = wire_inputs(recorded, recorded.named("Secret", CONFIG_SECRET))["stringData"]
    assert is_marked_secret(string_data), "the Alertmanager config must be a Pulumi secret"
    text: str = string_data["value"][alertmanager.CONFIG_KEY]
    return recorded, string_data, text


def amtool(runtimes: Runtimes, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(runtimes.amtool), *args], capture_output=True, text=True, timeout=60, check=False
    )


def rule_alerts() -> list[dict[str, Any]]:
    """Every alerting rule of monitoring/rules: its name and labels."""
    alerts = []
    for path in sorted(RULES_DIR.glob("*.yaml")):
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            alerts += [rule for rule in group["rules"] if "alert" in rule]
    return alerts


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_deployed_config_passes_amtool_and_routes_by_severity(
    mocked: Callable[[str], Stack], runtimes: Runtimes, tmp_path: Path, stack: str
) -> None:
    recorded, _, text = deploy(mocked, stack)
    config_file = tmp_path / "alertmanager.yaml"
    config_file.write_text(text)
    checked = amtool(runtimes, "check-config", str(config_file))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout

    # The chart runs our Secret and carries no notifier secret in its values.
    values = monitoring_release(recorded).inputs["values"]
    assert values["alertmanager"] == {"alertmanagerSpec": {"useExistingSecret": True}}
    assert k8s_validation.check_chart_values("kube-prometheus-stack", values) == []
    assert not any(value in str(values) for value in FAKE.values())
    assert recorded.named("Secret", CONFIG_SECRET).urn in monitoring_release(recorded).dependencies

    # Each severity's receiver holds exactly the notifiers the stack names for it, with their secrets.
    receivers = {receiver["name"]: receiver for receiver in yaml.safe_load(text)["receivers"]}
    alerting = load_config(stack).alerting
    integration = {"webhook": ("webhook_configs", "url"), "slack": ("slack_configs", "api_url")}
    integration["pagerduty"] = ("pagerduty_configs", "routing_key")
    for severity, receiver_name in alertmanager.RECEIVER_BY_SEVERITY.items():
        receiver = receivers[receiver_name]
        found = {
            notifier
            for notifier, (key, field) in integration.items()
            for entry in receiver.get(key, [])
            if entry[field] == FAKE[notifier]
        }
        assert found == set(getattr(alerting, severity)) and found, (stack, severity, receiver)

    # Routes: a critical lag alert of a query pages, a warning one goes to the warning receiver...
    def routes(labels: Mapping[str, str], receiver: str) -> subprocess.CompletedProcess[str]:
        pairs = [f"{name}={value}" for name, value in labels.items()]
        return amtool(
            runtimes, "config", "routes", "test", f"--config.file={config_file}",
            f"--verify.receivers={receiver}", *pairs,
        )  # fmt: skip

    lag = {"query": "clickstream-windows", "group": "checkpoints/clickstream-windows", "source": "checkpoint"}
    critical = routes(
        {"alertname": "StreamstackLagSLOFastBurn", "severity": "critical", **lag}, "streamstack-critical"
    )
    assert critical.returncode == 0, critical.stdout + critical.stderr
    warning = routes(
        {"alertname": "StreamstackLagSLOSlowBurn", "severity": "warning", **lag}, "streamstack-warning"
    )
    assert warning.returncode == 0, warning.stdout + warning.stderr
    wrong = routes(
        {"alertname": "StreamstackLagSLOSlowBurn", "severity": "warning", **lag}, "streamstack-critical"
    )
    assert wrong.returncode != 0, "amtool must fail a route test that does not hold"
    # ...every alert of our rules reaches the receiver of its severity, and the chart's Watchdog no one.
    alerts = rule_alerts()
    assert len(alerts) > 20
    for rule in alerts:
        severity = rule["labels"]["severity"]
        result = routes(
            {"alertname": rule["alert"], **rule["labels"]}, alertmanager.RECEIVER_BY_SEVERITY[severity]
        )
        assert result.returncode == 0, (rule["alert"], result.stdout + result.stderr)
    watchdog = routes({"alertname": "Watchdog", "severity": "none"}, alertmanager.NULL_RECEIVER)
    assert watchdog.returncode == 0, watchdog.stdout


def test_a_plain_text_notifier_secret_fails_naming_the_setting(mocked: Callable[[str], Stack]) -> None:
    with pytest.raises(ConfigError) as error:
        run_program(mocked, "dev", strings={"alertWebhookUrl": FAKE["webhook"]})
    message = str(error.value)
    assert message.startswith("streamstack:alertWebhookUrl: set in plain text"), message
    assert "pulumi config set --secret alertWebhookUrl" in message
    assert FAKE["webhook"] not in message


@pytest.mark.parametrize(
    ("strings", "expected"),
    [
        (
            {"alertWebhookUrl": "ftp://alerts.example.test"},
            "streamstack:alertWebhookUrl: not an http(s):// URL",
        ),
        ({"alertWebhookUrl": "  "}, "streamstack:alertWebhookUrl: empty"),
        # dev routes nothing to PagerDuty: a key set for it is a mistake, not silently dropped.
        ({"alertPagerdutyRoutingKey": FAKE["pagerduty"]}, "streamstack:alertPagerdutyRoutingKey: set, but"),
    ],
)
def test_a_bad_notifier_secret_fails_naming_the_setting(
    mocked: Callable[[str], Stack], strings: dict[str, str], expected: str
) -> None:
    with pytest.raises(ConfigError) as error:
        run_program(mocked, "dev", strings=strings, secret_keys=list(strings))
    assert str(error.value).startswith(expected), error.value
    assert not any(value.strip() and value in str(error.value) for value in strings.values())


@pytest.mark.parametrize(
    ("alerting", "expected"),
    [
        ({"critical": ["opsgenie"]}, "streamstack:alerting.critical: 'opsgenie' is not a notifier"),
        ({"warning": ["slack", "slack"]}, "streamstack:alerting.warning: a notifier is named twice"),
        ({"groupWait": "soon"}, "streamstack:alerting.groupWait: 'soon' is not a duration"),
        ({"notifierCidrs": ["hooks.slack.com"]}, "streamstack:alerting.notifierCidrs: 'hooks.slack.com'"),
        ({"pager": ["pagerduty"]}, "streamstack:alerting.pager: unknown setting"),
    ],
)
def test_bad_alerting_settings_fail_naming_the_field(alerting: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config("dev", alerting=alerting)
    assert str(error.value).startswith(expected), error.value


def test_without_its_secret_a_notifier_is_left_out_and_the_config_stays_valid(
    mocked: Callable[[str], Stack], runtimes: Runtimes, tmp_path: Path
) -> None:
    recorded = run_program(
        mocked, "prod", strings={"alertSlackApiUrl": FAKE["slack"]}, secret_keys=["alertSlackApiUrl"]
    )
    text = wire_inputs(recorded, recorded.named("Secret", CONFIG_SECRET))["stringData"]["value"][
        alertmanager.CONFIG_KEY
    ]
    critical = next(r for r in yaml.safe_load(text)["receivers"] if r["name"] == "streamstack-critical")
    assert "pagerduty_configs" not in critical and critical["slack_configs"][0]["api_url"] == FAKE["slack"]
    (tmp_path / "am.yaml").write_text(text)
    assert amtool(runtimes, "check-config", str(tmp_path / "am.yaml")).returncode == 0


def test_alertmanager_may_reach_its_notifiers_and_nothing_else(mocked: Callable[[str], Stack]) -> None:
    recorded = run_program(mocked, "prod")
    policy = recorded.named("NetworkPolicy", "alertmanager")
    egress = policy.spec["egress"]
    notifier_rules = [rule for rule in egress if any("ipBlock" in peer for peer in rule["to"])]
    assert notifier_rules == [
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 443, "protocol": "TCP"}]}
    ]


def test_render_of_a_stack_with_encrypted_notifier_secrets_writes_them_nowhere(tmp_path: Path) -> None:
    """`streamstack render` of prod with its notifier secrets set as `pulumi config set --secret` stores
    them: the Alertmanager Secret is written with its data redacted, and no written file holds the values
    the program received for them."""
    ciphertext = {"secure": "v1:Zm9yLXRlc3Rpbmc6bm90LWEtcmVhbC1rZXk="}
    secrets = secrets_for("prod")
    rendered = render_stack("prod", overrides={key: ciphertext for key in secrets})
    config, secret_keys = rendered_stack_config(load_project(), "prod", {key: ciphertext for key in secrets})
    received = [config[f"streamstack:{key}"] for key in secrets]
    assert sorted(secret_keys) == sorted(f"streamstack:{key}" for key in secrets) and all(received)
    out = tmp_path / "out"
    write_rendered(rendered, out)
    (secret,) = rendered.find("Secret", CONFIG_SECRET)
    assert secret["stringData"] == {alertmanager.CONFIG_KEY: SECRET_PLACEHOLDER}
    for path in (path for path in out.rglob("*") if path.is_file()):
        text = path.read_text(encoding="utf-8")
        assert not any(value in text for value in received), path

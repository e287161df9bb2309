"""The Alertmanager configuration the stack deploys: one pure function of `streamstack:alerting` and the
notifiers' secrets, used by the Monitoring component (as the Secret the Alertmanager reads) and by the tests
and the local Alertmanager (streamstack), so what is checked is what is deployed.

Routing, by the `severity` label every rule in monitoring/rules carries:
- `severity="critical"` -> receiver CRITICAL_RECEIVER (the notifiers of `alerting.critical`, e.g. PagerDuty);
- `severity="warning"`, and anything without a known severity -> WARNING_RECEIVER (`alerting.warning`, e.g.
  Slack or a webhook);
- kube-prometheus-stack's always-firing `Watchdog` and `InfoInhibitor` and `severity` info/none -> "null",
  as the chart's own default config does.
Notifications are grouped by GROUP_BY: one per alert and query (or consumer group) and namespace.

Inhibition: a critical alert mutes the warnings about the same query (`query` label, same namespace), and
about the same consumer group (`source`, `group`, same namespace). Both sides must carry the label: alerts
without a query are never muted by another one without a query.

Compatible with Alertmanager 0.25 (Debian bookworm, the local runtime) and 0.34 (kube-prometheus-stack
88.5.3): `matchers` syntax, no newer fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from infra.config import ALERT_SEVERITIES, AlertingConfig

CRITICAL_RECEIVER = "streamstack-critical"
WARNING_RECEIVER = "streamstack-warning"
NULL_RECEIVER = "null"
RECEIVER_BY_SEVERITY = {"critical": CRITICAL_RECEIVER, "warning": WARNING_RECEIVER}
GROUP_BY = ("alertname", "namespace", "query", "group")
CONFIG_KEY = "alertmanager.yaml"  # the key of the config in the Secret the Prometheus Operator reads

SLACK_TITLE = (
    '[{{ .Status | toUpper }}{{ if eq .Status "firing" }}:{{ .Alerts.Firing | len }}{{ end }}] '
    "{{ .CommonLabels.alertname }} {{ .CommonLabels.query }}{{ .CommonLabels.group }}"
)
SLACK_TEXT = (
    "{{ range .Alerts }}*{{ .Labels.severity }}*: {{ .Annotations.summary }}\n"
    "{{ .Annotations.description }}\nRunbook: {{ .Annotations.runbook }}\n{{ end }}"
)


def _integration(notifier: str, secret: str, severity: str, alerting: AlertingConfig) -> tuple[str, Any]:
    """(`<notifier>_configs`, one entry) for a receiver."""
    if notifier == "webhook":
        return "webhook_configs", {"url": secret, "send_resolved": True}
    if notifier == "slack":
        slack: dict[str, Any] = {
            "api_url": secret,
            "send_resolved": True,
            "title": SLACK_TITLE,
            "text": SLACK_TEXT,
        }
        if alerting.slack_channel:
            slack["channel"] = alerting.slack_channel
        return "slack_configs", slack
    if notifier == "pagerduty":
        return "pagerduty_configs", {
            "routing_key": secret,
            "send_resolved": True,
            "severity": severity,
            "description": "{{ .CommonLabels.alertname }} {{ .CommonAnnotations.summary }}",
        }
    raise ValueError(f"unknown notifier {notifier!r}")


def _receiver(
    name: str, severity: str, alerting: AlertingConfig, secrets: Mapping[str, str]
) -> dict[str, Any]:
    receiver: dict[str, Any] = {"name": name}
    for notifier in getattr(alerting, severity):
        if notifier not in secrets:  # unset: alerting_secrets() warned in the preview
            continue
        key, entry = _integration(notifier, secrets[notifier], severity, alerting)
        receiver.setdefault(key, []).append(entry)
    return receiver


def alertmanager_config(alerting: AlertingConfig, secrets: Mapping[str, str]) -> dict[str, Any]:
    """Alertmanager's configuration file as a mapping; `secrets` maps a notifier (NOTIFIER_SECRETS) to its
    URL or routing key, for each one set (the plain values: call this inside `Output.apply`)."""
    routes: list[dict[str, Any]] = [
        {"receiver": NULL_RECEIVER, "matchers": ['alertname=~"Watchdog|InfoInhibitor"']},
        *(
            {"receiver": RECEIVER_BY_SEVERITY[severity], "matchers": [f'severity="{severity}"']}
            for severity in ALERT_SEVERITIES
        ),
        {"receiver": NULL_RECEIVER, "matchers": ['severity=~"info|none"']},
    ]
    inhibit_rules = [
        {
            "source_matchers": ['severity="critical"', f'{label}=~".+"'],
            "target_matchers": ['severity="warning"', f'{label}=~".+"'],
            "equal": list(equal),
        }
        for label, equal in (("query", ("namespace", "query")), ("group", ("namespace", "source", "group")))
    ]
    return {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": WARNING_RECEIVER,
            "group_by": list(GROUP_BY),
            "group_wait": alerting.group_wait,
            "group_interval": alerting.group_interval,
            "repeat_interval": alerting.repeat_interval,
            "routes": routes,
        },
        "inhibit_rules": inhibit_rules,
        "receivers": [
            {"name": NULL_RECEIVER},
            *(
                _receiver(RECEIVER_BY_SEVERITY[severity], severity, alerting, secrets)
                for severity in ALERT_SEVERITIES
            ),
        ],
    }


def alertmanager_yaml(alerting: AlertingConfig, secrets: Mapping[str, str]) -> str:
    """`alertmanager_config` as the YAML file Alertmanager reads."""
    return yaml.safe_dump(alertmanager_config(alerting, secrets), sort_keys=False, width=1000)

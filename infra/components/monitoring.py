"""Monitoring: kube-prometheus-stack (Helm) with discovery that ignores the `release` label, the Grafana
dashboard sidecar on, values that work on kind, and streamstack's own rules and dashboards.

Rules are the Prometheus rule files in `monitoring/rules/*.yaml` (the same files the local Prometheus
loads; promtool tests under `monitoring/rules/tests/` are not rules), each installed as one PrometheusRule.
Dashboards are the generated JSON files in `monitoring/dashboards/generated/`, each in a ConfigMap labelled
`grafana_dashboard: "1"` that Grafana's sidecar imports from any namespace. Both directories are found from
this file's location, never from the working directory.

Alerts: the Alertmanager reads its configuration from a Secret of ours (infra/alertmanager.py renders it from
`streamstack:alerting` and the notifiers' secrets) named as the operator expects it
(`alertmanager-<release>-alertmanager`), with `alertmanager.alertmanagerSpec.useExistingSecret`, not from the
chart's `alertmanager.config` value: Helm keeps a release's values in
its release record (readable with `helm get values`) and Pulumi the Release's inputs in its state, so the
Slack/webhook URLs and the PagerDuty key stay only in a Secret whose data Pulumi encrypts.

The monitoring namespace denies all traffic but the flows monitoring needs (infra/network.py): Prometheus
scrapes the metrics ports of every namespace (the jobs' and the exporter's ports come in `scrape_ports`) and
of the nodes, Grafana queries Prometheus and Alertmanager, the operator's webhook takes the API server's
calls, every pod reaches the Kubernetes API. The policies exist before the release installs any pod.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes
import yaml

from infra import alertmanager, network
from infra.components.common import child, metadata, platform_namespace
from infra.components.crds import custom_resource_definitions, load_crds
from infra.config import (
    DASHBOARDS_DIR,
    RULES_DIR,
    AlertingConfig,
    ConfigError,
    MonitoringConfig,
    setting,
)

KUBE_PROMETHEUS_STACK_REPOSITORY = "https://prometheus-community.github.io/helm-charts"
DASHBOARD_LABEL = "grafana_dashboard"
RULE_GROUP_KEYS = {
    "name",
    "rules",
    "interval",
    "limit",
    "labels",
    "query_offset",
    "partial_response_strategy",
}
RULE_KEYS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
CONFIGMAP_LIMIT_BYTES = 1024 * 1024
# A cold node pulls about ten images for the release (tests/infra/test_sizing.py); helm.v3.Release: 300 s.
RELEASE_TIMEOUT_S = 900
# The grafana sub-chart's `admin.userKey`/`passwordKey` defaults: the keys of its own generated Secret too, so
# the `grafanaAdminPassword` output reads `admin-password` whichever Secret holds it.
GRAFANA_ADMIN_USER = "admin"
GRAFANA_ADMIN_USER_KEY = "admin-user"
GRAFANA_ADMIN_PASSWORD_KEY = "admin-password"


@dataclass(frozen=True)
class RuleFile:
    name: str
    groups: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Dashboard:
    name: str
    file_name: str
    json_text: str


def _object_name(stem: str) -> str:
    return stem.lower().replace("_", "-").replace(".", "-")


def load_rule_files(directory: Path) -> tuple[RuleFile, ...]:
    """Every `*.yaml`/`*.yml` rule file directly in `directory` (not its `tests/`); a file without valid
    `groups:` raises ConfigError naming it. A missing directory means no rules."""
    if not directory.is_dir():
        return ()
    rule_files = []
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        try:
            document = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as error:
            raise ConfigError(f"{path}: not YAML ({error})") from None
        groups = document.get("groups") if isinstance(document, dict) else None
        if not isinstance(groups, list) or not groups:
            raise ConfigError(f"{path}: not a Prometheus rule file (expected a non-empty `groups:` list)")
        for index, group in enumerate(groups):
            where = f"{path}: groups[{index}]"
            if not isinstance(group, dict) or not isinstance(group.get("name"), str):
                raise ConfigError(f"{where}: a group needs a name")
            unknown = sorted(set(group) - RULE_GROUP_KEYS)
            if unknown:
                raise ConfigError(f"{where}.{unknown[0]}: not a rule group field")
            for rule_index, rule in enumerate(group.get("rules") or []):
                bad = sorted(set(rule) - RULE_KEYS) if isinstance(rule, dict) else ["(not a mapping)"]
                if bad or "expr" not in rule or ("alert" in rule) == ("record" in rule):
                    raise ConfigError(
                        f"{where}.rules[{rule_index}]: a rule needs expr and exactly one of alert or record"
                        + (f" (unknown field {bad[0]})" if bad else "")
                    )
        rule_files.append(RuleFile(_object_name(path.stem), tuple(groups)))
    return tuple(rule_files)


def load_dashboards(directory: Path) -> tuple[Dashboard, ...]:
    """Every `*.json` dashboard in `directory`; invalid JSON or one too big for a ConfigMap raises ConfigError
    naming the file. A missing directory means no dashboards."""
    if not directory.is_dir():
        return ()
    dashboards = []
    for path in sorted(directory.glob("*.json")):
        text = path.read_text(encoding="utf-8")
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{path}: not JSON ({error})") from None
        if not isinstance(document, dict) or "panels" not in document:
            raise ConfigError(f"{path}: not a Grafana dashboard (no `panels`)")
        if len(text.encode("utf-8")) > CONFIGMAP_LIMIT_BYTES:
            raise ConfigError(f"{path}: larger than a ConfigMap can hold (1 MiB)")
        dashboards.append(Dashboard(_object_name(path.stem), path.name, text))
    return tuple(dashboards)


@dataclass(frozen=True, kw_only=True)
class MonitoringArgs:
    monitoring: MonitoringConfig
    # Metrics ports of our workloads (each job's driver, the lag exporter) that Prometheus must reach.
    scrape_ports: tuple[int, ...] = ()
    rules_dir: Path = RULES_DIR
    dashboards_dir: Path = DASHBOARDS_DIR
    # The stack secret `streamstack:grafanaAdminPassword`; None: the grafana sub-chart generates one.
    grafana_admin_password: pulumi.Input[str] | None = None
    # The Kubernetes API server's endpoint addresses (cluster.apiServerCidrs): the operators' API egress.
    api_server_cidrs: tuple[str, ...] = ()
    # The nodes' addresses (cluster.nodeCidrs): where Prometheus scrapes the kubelet and node-exporter.
    node_cidrs: tuple[str, ...] = ()
    # `streamstack:alerting` and its notifiers' URLs and keys as Pulumi secrets (config.alerting_secrets).
    alerting: AlertingConfig = field(default_factory=AlertingConfig)
    alerting_secrets: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)


def grafana_admin_secret_name(config: MonitoringConfig) -> str:
    """The Secret holding Grafana's admin password when the stack sets one."""
    return f"{config.release_name}-grafana-admin"


def alertmanager_secret_name(config: MonitoringConfig) -> str:
    """The Secret with the Alertmanager's configuration (infra/alertmanager.py), key `alertmanager.yaml`: the
    one the Prometheus Operator reads for the chart's Alertmanager `<fullname>-alertmanager` by default,
    `alertmanager-<name>` (the chart truncates its fullname, our release name, to 26 characters)."""
    return f"alertmanager-{config.release_name[:26].rstrip('-')}-alertmanager"


def chart_values(
    config: MonitoringConfig,
    grafana_admin_secret: str | None = None,
    alertmanager_secret: str | None = None,
) -> dict[str, Any]:
    """kube-prometheus-stack's values; `grafana_admin_secret` names a Secret with Grafana's admin user and
    password (GRAFANA_ADMIN_USER_KEY, GRAFANA_ADMIN_PASSWORD_KEY) to use instead of a generated one;
    with `alertmanager_secret` (alertmanager_secret_name) the chart renders no Alertmanager config Secret of
    its own from `alertmanager.config` (whose values would carry the notifiers' secrets into Helm's release
    record), and the operator reads ours."""
    prometheus_spec: dict[str, Any] = {
        # Select every ServiceMonitor, PodMonitor, rule, probe and scrape config, not only those carrying
        # this release's `release:` label.
        "serviceMonitorSelectorNilUsesHelmValues": False,
        "podMonitorSelectorNilUsesHelmValues": False,
        "ruleSelectorNilUsesHelmValues": False,
        "probeSelectorNilUsesHelmValues": False,
        "scrapeConfigSelectorNilUsesHelmValues": False,
        "retention": config.prometheus_retention,
    }
    resources = config.prometheus_resources.as_dict()
    if resources:
        prometheus_spec["resources"] = resources
    if config.prometheus_storage_size:
        claim_spec: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": config.prometheus_storage_size}},
        }
        if config.prometheus_storage_class:
            claim_spec["storageClassName"] = config.prometheus_storage_class
        prometheus_spec["storageSpec"] = {"volumeClaimTemplate": {"spec": claim_spec}}
    grafana: dict[str, Any] = {
        "sidecar": {
            "dashboards": {
                "enabled": True,
                "label": DASHBOARD_LABEL,
                "labelValue": "1",
                "searchNamespace": "ALL",
            }
        }
    }
    if grafana_admin_secret is not None:
        grafana["admin"] = {
            "existingSecret": grafana_admin_secret,
            "userKey": GRAFANA_ADMIN_USER_KEY,
            "passwordKey": GRAFANA_ADMIN_PASSWORD_KEY,
        }
    values: dict[str, Any] = {
        # Names start with the release name: <release>-grafana, <release>-prometheus.
        "fullnameOverride": config.release_name,
        "prometheus": {"prometheusSpec": prometheus_spec},
        "grafana": grafana,
        # Control-plane components kind (and managed clusters) do not expose: their targets would stay down
        # and fire alerts.
        "kubeEtcd": {"enabled": False},
        "kubeControllerManager": {"enabled": False},
        "kubeScheduler": {"enabled": False},
        "kubeProxy": {"enabled": False},
        # kind nodes are containers: mounting the host's root filesystem fails there.
        "prometheus-node-exporter": {"hostRootFsMount": {"enabled": False}},
    }
    if alertmanager_secret is not None:
        # Our Secret has the operator's default name: `configSecret` (commented out in the chart's values)
        # stays unset, and the Alertmanager spec refers to nothing the chart does not list.
        values["alertmanager"] = {"alertmanagerSpec": {"useExistingSecret": True}}
    return values


class Monitoring(pulumi.ComponentResource):
    """kube-prometheus-stack 88.5.3 plus streamstack's PrometheusRules and dashboard ConfigMaps, and with
    `grafana_admin_password` the Secret Grafana takes its admin credentials from."""

    namespace: pulumi.Output[str]
    release: kubernetes.helm.v3.Release
    grafana_admin: kubernetes.core.v1.Secret | None
    # The Secret with Grafana's admin password (key GRAFANA_ADMIN_PASSWORD_KEY): ours, or the chart's.
    grafana_admin_secret: str
    # The Secret with the Alertmanager's configuration (key alertmanager.yaml).
    alertmanager_secret: str
    alertmanager_config: kubernetes.core.v1.Secret
    rules: dict[str, kubernetes.apiextensions.CustomResource]
    dashboards: dict[str, kubernetes.core.v1.ConfigMap]
    grafana_service: str
    prometheus_service: str

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("streamstack:monitoring:Monitoring", name, None, opts)
        config = args.monitoring
        rule_files = load_rule_files(args.rules_dir)
        dashboards = load_dashboards(args.dashboards_dir)
        if not rule_files:
            pulumi.log.warn(f"no Prometheus rule files in {args.rules_dir}", self)
        if not dashboards:
            pulumi.log.warn(f"no Grafana dashboards in {args.dashboards_dir}", self)

        monitoring_namespace, policies = platform_namespace(
            self,
            name,
            config.namespace,
            network.monitoring_policies(
                config.namespace,
                args.scrape_ports,
                args.api_server_cidrs,
                notifier_egress=(args.alerting.notifier_cidrs, args.alerting.notifier_ports),
                node_cidrs=args.node_cidrs,
            ),
            # node-exporter needs the host's network and PID namespaces: privileged, warned about.
            enforce="privileged",
        )
        # The Prometheus Operator's CRDs of the pinned chart version (infra/components/crds.py); the release
        # skips its own.
        crds = custom_resource_definitions(
            self,
            name,
            load_crds("kube-prometheus-stack", config.chart_version, setting("monitoring.chartVersion")),
        )
        release_dependencies: list[pulumi.Resource] = [monitoring_namespace, *policies, *crds]
        self.grafana_admin = None
        own_admin_secret = None
        if args.grafana_admin_password is not None:
            own_admin_secret = grafana_admin_secret_name(config)
            self.grafana_admin = kubernetes.core.v1.Secret(
                f"{name}-grafana-admin",
                metadata=metadata(own_admin_secret, config.namespace),
                type="Opaque",
                # The SDK marks a Secret's data a Pulumi secret: encrypted in the state, hidden in previews.
                string_data={
                    GRAFANA_ADMIN_USER_KEY: GRAFANA_ADMIN_USER,
                    GRAFANA_ADMIN_PASSWORD_KEY: args.grafana_admin_password,
                },
                opts=child(self, [monitoring_namespace]),
            )
            release_dependencies.append(self.grafana_admin)
        # The Alertmanager's routing (infra/alertmanager.py), built inside apply from the notifiers' secrets:
        # the YAML is itself a Pulumi secret whenever one of them is set, and the Secret's data always is.
        secrets = dict(args.alerting_secrets)
        routing = pulumi.Output.all(**secrets).apply(
            lambda values: alertmanager.alertmanager_yaml(args.alerting, values)
        )
        self.alertmanager_secret = alertmanager_secret_name(config)
        self.alertmanager_config = kubernetes.core.v1.Secret(
            f"{name}-alertmanager-config",
            metadata=metadata(self.alertmanager_secret, config.namespace),
            type="Opaque",
            string_data={alertmanager.CONFIG_KEY: routing},
            opts=child(self, [monitoring_namespace]),
        )
        release_dependencies.append(self.alertmanager_config)
        self.release = kubernetes.helm.v3.Release(
            f"{name}-kube-prometheus-stack",
            kubernetes.helm.v3.ReleaseArgs(
                name=config.release_name,
                chart="kube-prometheus-stack",
                version=config.chart_version,
                repository_opts=kubernetes.helm.v3.RepositoryOptsArgs(repo=KUBE_PROMETHEUS_STACK_REPOSITORY),
                namespace=monitoring_namespace.metadata.name,
                values=chart_values(config, own_admin_secret, self.alertmanager_secret),
                cleanup_on_fail=True,
                timeout=RELEASE_TIMEOUT_S,
                skip_crds=True,
            ),
            opts=child(self, release_dependencies),
        )
        self.rules = {
            rule_file.name: kubernetes.apiextensions.CustomResource(
                f"{name}-rules-{rule_file.name}",
                api_version="monitoring.coreos.com/v1",
                kind="PrometheusRule",
                metadata=metadata(rule_file.name, config.namespace),
                spec={"groups": list(rule_file.groups)},
                opts=child(self, [self.release]),
            )
            for rule_file in rule_files
        }
        self.dashboards = {
            dashboard.name: kubernetes.core.v1.ConfigMap(
                f"{name}-dashboard-{dashboard.name}",
                metadata=metadata(f"dashboard-{dashboard.name}", config.namespace, {DASHBOARD_LABEL: "1"}),
                data={dashboard.file_name: dashboard.json_text},
                opts=child(self, [monitoring_namespace]),
            )
            for dashboard in dashboards
        }
        self.namespace = monitoring_namespace.metadata.name
        self.grafana_service = f"{config.release_name}-grafana"
        # Without a Secret of ours, the grafana sub-chart generates one named like its Service.
        self.grafana_admin_secret = own_admin_secret or self.grafana_service
        self.prometheus_service = f"{config.release_name}-prometheus"
        self.register_outputs(
            {
                "namespace": self.namespace,
                "grafana_service": self.grafana_service,
                "prometheus_service": self.prometheus_service,
                "grafana_admin_secret": self.grafana_admin_secret,
                "alertmanager_secret": self.alertmanager_secret,
                "rules": sorted(self.rules),
                "dashboards": sorted(self.dashboards),
            }
        )

"""`streamstack:lagExporter`, `streamstack:monitoring`, `streamstack:loadGenerator` and
`streamstack:alerting`."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from contracts.pipeline import DNS_LABEL_PATTERN
from infra.config.base import (
    LOG_LEVELS,
    PULL_POLICIES,
    ConfigError,
    Resources,
    Section,
    _require_quantity,
    _resources,
    require_choice,
    require_match,
    require_minimum,
    setting,
)
from infra.config.spark import JobConfig, image_tag
from infra.config.versions import require_pinned_chart

EXPORTER_RESOURCES = Resources(
    setting("lagExporter.resources"),
    {"cpu": "50m", "memory": "128Mi"},
    {"cpu": "500m", "memory": "256Mi"},
)


_PROMETHEUS_RETENTION = re.compile(r"^[0-9]+(ms|s|m|h|d|w|y)$")


@dataclass(frozen=True)
class LagExporterConfig:
    image: str | None = None
    enabled: bool = True
    image_pull_policy: str = "IfNotPresent"
    port: int = 9308
    refresh_interval: float = 10.0
    window: float = 300.0
    read_checkpoints: bool = False
    log_level: str = "INFO"
    run_as_user: int = 10001
    resources: Resources = EXPORTER_RESOURCES

    def __post_init__(self) -> None:
        require_choice(setting("lagExporter.imagePullPolicy"), self.image_pull_policy, PULL_POLICIES)
        require_minimum(setting("lagExporter.port"), self.port, 1024)
        for key, seconds in (("refreshInterval", self.refresh_interval), ("window", self.window)):
            if seconds <= 0:
                raise ConfigError(
                    f"{setting(f'lagExporter.{key}')}: expected a positive number, got {seconds!r}"
                )
        require_choice(setting("lagExporter.logLevel"), self.log_level, LOG_LEVELS)
        require_minimum(setting("lagExporter.runAsUser"), self.run_as_user, 1)
        if self.window < 2 * self.refresh_interval:
            raise ConfigError(
                f"{setting('lagExporter.window')}: {self.window} must be at least twice "
                f"{setting('lagExporter.refreshInterval')} ({self.refresh_interval})"
            )
        if not self.enabled:
            return
        if self.image is None:
            raise ConfigError(f"{setting('lagExporter.image')}: required while the exporter is enabled")
        tag = image_tag(self.image)
        if tag is None or tag == "latest":
            raise ConfigError(f"{setting('lagExporter.image')}: {self.image!r} needs a pinned tag")


def require_exporter_reach(exporter: LagExporterConfig, jobs: Sequence[JobConfig], nodes: int) -> None:
    """Reading checkpoints mounts every job's claim into the exporter's pod as well."""
    if not (exporter.enabled and exporter.read_checkpoints):
        return
    for job in jobs:
        mode = job.checkpoint.access_mode
        if mode == "ReadWriteOncePod" or (mode == "ReadWriteOnce" and nodes > 1):
            raise ConfigError(
                f"{setting('lagExporter.readCheckpoints')}: the exporter would mount the checkpoint of job "
                f"{job.name}, whose {mode} volume ({job.checkpoint.access_mode_setting}) cannot be shared "
                f"with its driver on a {nodes}-node cluster; use ReadWriteMany or rely on the shadow groups"
            )


@dataclass(frozen=True)
class LoadGeneratorConfig:
    """A KafkaUser for synthetic producers (jobs/producers), allowed only to write the pipeline's input
    topics, and a NetworkPolicy that lets pods labelled as load generators reach the brokers."""

    enabled: bool = True


@dataclass(frozen=True)
class MonitoringConfig:
    namespace: str = "monitoring"
    chart_version: str = "88.5.3"
    release_name: str = "kube-prometheus-stack"
    prometheus_retention: str = "2d"
    prometheus_storage_size: str | None = None
    prometheus_storage_class: str | None = None
    prometheus_resources: Resources = field(
        default_factory=partial(Resources, setting("monitoring.prometheus.resources"))
    )

    def __post_init__(self) -> None:
        require_match(setting("monitoring.namespace"), self.namespace, DNS_LABEL_PATTERN)
        require_match(setting("monitoring.releaseName"), self.release_name, DNS_LABEL_PATTERN)
        require_match(
            setting("monitoring.prometheus.retention"), self.prometheus_retention, _PROMETHEUS_RETENTION
        )
        _require_quantity(setting("monitoring.prometheus.storageSize"), self.prometheus_storage_size)
        require_pinned_chart(setting("monitoring.chartVersion"), "kube-prometheus-stack", self.chart_version)

    @property
    def grafana_service(self) -> str:
        return f"{self.release_name}-grafana"


# Alertmanager's notifiers, each with the stack secret that holds its URL or key (never plain config).
NOTIFIER_SECRETS: Mapping[str, str] = {
    "webhook": "alertWebhookUrl",
    "slack": "alertSlackApiUrl",
    "pagerduty": "alertPagerdutyRoutingKey",
}


# Of those secrets, the ones that are URLs (checked for a scheme; the PagerDuty routing key is not one).
URL_NOTIFIERS = ("webhook", "slack")


ALERT_SEVERITIES = ("critical", "warning")


_AM_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


@dataclass(frozen=True)
class AlertingConfig:
    """Where Alertmanager sends our alerts (`streamstack:alerting`): the notifiers each severity reaches, the
    Slack channel and the notification timing. The notifiers' URLs and keys are stack secrets
    (NOTIFIER_SECRETS, read by `alerting_secrets`); `notifier_cidrs`/`notifier_ports` are where Alertmanager
    may connect to deliver them (its NetworkPolicy egress)."""

    critical: tuple[str, ...] = ()
    warning: tuple[str, ...] = ()
    slack_channel: str | None = None
    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"
    notifier_cidrs: tuple[str, ...] = ("0.0.0.0/0",)
    notifier_ports: tuple[int, ...] = (443,)

    def __post_init__(self) -> None:
        for severity in ALERT_SEVERITIES:
            chosen = getattr(self, severity)
            for notifier in chosen:
                if notifier not in NOTIFIER_SECRETS:
                    raise ConfigError(
                        f"{setting(f'alerting.{severity}')}: {notifier!r} is not a notifier "
                        f"(known: {', '.join(NOTIFIER_SECRETS)})"
                    )
            if len(set(chosen)) != len(chosen):
                raise ConfigError(f"{setting(f'alerting.{severity}')}: a notifier is named twice")
        for key, value in (
            ("groupWait", self.group_wait),
            ("groupInterval", self.group_interval),
            ("repeatInterval", self.repeat_interval),
        ):
            if not _AM_DURATION.match(value):
                raise ConfigError(
                    f"{setting(f'alerting.{key}')}: {value!r} is not a duration such as 30s or 4h"
                )
        for cidr in self.notifier_cidrs:
            try:
                ipaddress.ip_network(cidr)
            except ValueError:
                raise ConfigError(f"{setting('alerting.notifierCidrs')}: {cidr!r} is not a CIDR") from None
        for port in self.notifier_ports:
            if not 0 < port < 65536:
                raise ConfigError(f"{setting('alerting.notifierPorts')}: {port} is not a TCP port")

    @property
    def notifiers(self) -> tuple[str, ...]:
        """Every notifier some severity reaches, in NOTIFIER_SECRETS order."""
        return tuple(name for name in NOTIFIER_SECRETS if name in (*self.critical, *self.warning))


def _lag_exporter(section: Section) -> LagExporterConfig:
    section.only(
        "enabled",
        "image",
        "imagePullPolicy",
        "port",
        "refreshInterval",
        "window",
        "readCheckpoints",
        "logLevel",
        "runAsUser",
        "resources",
    )
    default = LagExporterConfig
    return LagExporterConfig(
        image=section.string("image", None),
        enabled=section.boolean("enabled", default.enabled),
        image_pull_policy=section.string("imagePullPolicy", default.image_pull_policy),
        port=section.integer("port", default.port),
        refresh_interval=float(section.number("refreshInterval", default.refresh_interval)),
        window=float(section.number("window", default.window)),
        read_checkpoints=section.boolean("readCheckpoints", default.read_checkpoints),
        log_level=section.string("logLevel", default.log_level),
        run_as_user=section.integer("runAsUser", default.run_as_user),
        resources=_resources(section.section("resources"), EXPORTER_RESOURCES),
    )


def _monitoring(section: Section) -> MonitoringConfig:
    section.only("namespace", "chartVersion", "releaseName", "prometheus")
    prometheus = section.section("prometheus")
    prometheus.only("retention", "storageSize", "storageClass", "resources")
    return MonitoringConfig(
        namespace=section.string("namespace", MonitoringConfig.namespace),
        chart_version=section.string("chartVersion", MonitoringConfig.chart_version),
        release_name=section.string("releaseName", MonitoringConfig.release_name),
        prometheus_retention=prometheus.string("retention", MonitoringConfig.prometheus_retention),
        prometheus_storage_size=prometheus.string("storageSize", None),
        prometheus_storage_class=prometheus.string("storageClass", None),
        prometheus_resources=_resources(prometheus.section("resources")),
    )


def _load_generator(section: Section) -> LoadGeneratorConfig:
    section.only("enabled")
    return LoadGeneratorConfig(enabled=section.boolean("enabled", LoadGeneratorConfig.enabled))


def _alerting(section: Section) -> AlertingConfig:
    section.only(
        *ALERT_SEVERITIES,
        "slackChannel",
        "groupWait",
        "groupInterval",
        "repeatInterval",
        "notifierCidrs",
        "notifierPorts",
    )
    default = AlertingConfig
    ports = section._get(
        "notifierPorts",
        list(default.notifier_ports),
        lambda v: isinstance(v, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in v),
        "a list of port numbers",
    )
    return AlertingConfig(
        critical=section.strings("critical", ()),
        warning=section.strings("warning", ()),
        slack_channel=section.string("slackChannel", None),
        group_wait=section.string("groupWait", default.group_wait),
        group_interval=section.string("groupInterval", default.group_interval),
        repeat_interval=section.string("repeatInterval", default.repeat_interval),
        notifier_cidrs=section.strings("notifierCidrs", default.notifier_cidrs),
        notifier_ports=tuple(ports),
    )

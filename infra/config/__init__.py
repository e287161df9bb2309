"""The typed stack configuration: `load()` reads `Pulumi.<stack>.yaml` (`streamstack:` keys) and checks it.

Every setting is a structured value under one key (`streamstack:kafka`, `streamstack:spark`, ...) read with
`pulumi.Config("streamstack").get_object`. A misspelt key, a wrong type or a combination that cannot work
raises `ConfigError` whose message starts with the setting to change, e.g. `streamstack:kafka.version`, so
`pulumi preview` fails before anything is created. The section readers only read and convert: each config
dataclass checks its own values when it is built, so one built in code cannot hold a bad value either.
Importing this module creates no resources. The secrets, `streamstack:grafanaAdminPassword` and the alert
notifiers' URLs and keys (NOTIFIER_SECRETS), are not part of `load()`: `grafana_admin_password()` and
`alerting_secrets()` read them as Pulumi secrets.

Guard rails (see infra/README.md): a Kafka version the pinned Strimzi does not run; a Spark version that does
not match the image tag or the spark-operator; a stateful job on a checkpoint volume only the driver can
reach; a topic replicated more often than there are brokers; a min ISR above the replication factor.
"""

from contracts.pipeline import CLEANUP_POLICIES, MAX_JOB_NAME
from infra.config.base import (
    ACCESS_MODES,
    CRDS_DIR,
    CRDS_SOURCE_FILE,
    DASHBOARDS_DIR,
    DRIVER_ONLY_ACCESS_MODES,
    LAG_EXPORTER_CHART,
    LOG_LEVELS,
    NODE_ROLES,
    PREFIX,
    PULL_POLICIES,
    REPO_ROOT,
    RULES_DIR,
    STREAMING_JOB_CHART,
    ConfigError,
    Layered,
    Origin,
    Resources,
    Section,
    setting,
)
from infra.config.cdc import CdcConfig, ConnectConfig, DatabaseConfig, ExternalDatabase, InClusterDatabase
from infra.config.cluster import ClusterConfig, NodePool
from infra.config.kafka import KafkaConfig, TopicConfig, require_topic_fits
from infra.config.monitoring import (
    ALERT_SEVERITIES,
    EXPORTER_RESOURCES,
    NOTIFIER_SECRETS,
    URL_NOTIFIERS,
    AlertingConfig,
    LagExporterConfig,
    LoadGeneratorConfig,
    MonitoringConfig,
    require_exporter_reach,
)
from infra.config.secrets import (
    CDC_DATABASE_PASSWORD,
    GRAFANA_ADMIN_PASSWORD,
    alerting_secrets,
    cdc_database_password,
    grafana_admin_password,
)
from infra.config.spark import (
    CheckpointConfig,
    DriverResources,
    ExecutorResources,
    ImageReference,
    JobConfig,
    SparkConfig,
    SparkPodResources,
    image_reference,
    image_tag,
    require_checkpoint_reach,
)
from infra.config.stack import SECTIONS, StackConfig, check_known_keys, configured_keys, load
from infra.config.versions import (
    KUBE_PROMETHEUS_STACK_VERSIONS,
    SPARK_OPERATOR_SPARK_MAJORS,
    STRIMZI_KAFKA_VERSIONS,
    STRIMZI_MIN_KUBERNETES,
    require_pinned_chart,
)

__all__ = [
    "ACCESS_MODES",
    "ALERT_SEVERITIES",
    "CDC_DATABASE_PASSWORD",
    "CLEANUP_POLICIES",
    "CRDS_DIR",
    "CRDS_SOURCE_FILE",
    "DASHBOARDS_DIR",
    "DRIVER_ONLY_ACCESS_MODES",
    "EXPORTER_RESOURCES",
    "GRAFANA_ADMIN_PASSWORD",
    "KUBE_PROMETHEUS_STACK_VERSIONS",
    "LAG_EXPORTER_CHART",
    "LOG_LEVELS",
    "MAX_JOB_NAME",
    "NODE_ROLES",
    "NOTIFIER_SECRETS",
    "PREFIX",
    "PULL_POLICIES",
    "REPO_ROOT",
    "RULES_DIR",
    "SECTIONS",
    "SPARK_OPERATOR_SPARK_MAJORS",
    "STREAMING_JOB_CHART",
    "STRIMZI_KAFKA_VERSIONS",
    "STRIMZI_MIN_KUBERNETES",
    "URL_NOTIFIERS",
    "AlertingConfig",
    "CdcConfig",
    "CheckpointConfig",
    "ClusterConfig",
    "ConfigError",
    "ConnectConfig",
    "DatabaseConfig",
    "DriverResources",
    "ExecutorResources",
    "ExternalDatabase",
    "ImageReference",
    "InClusterDatabase",
    "JobConfig",
    "KafkaConfig",
    "LagExporterConfig",
    "Layered",
    "LoadGeneratorConfig",
    "MonitoringConfig",
    "NodePool",
    "Origin",
    "Resources",
    "Section",
    "SparkConfig",
    "SparkPodResources",
    "StackConfig",
    "TopicConfig",
    "alerting_secrets",
    "cdc_database_password",
    "check_known_keys",
    "configured_keys",
    "grafana_admin_password",
    "image_reference",
    "image_tag",
    "load",
    "require_checkpoint_reach",
    "require_exporter_reach",
    "require_pinned_chart",
    "require_topic_fits",
    "setting",
]

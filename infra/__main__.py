"""The streamstack stack: stack config -> components -> outputs (see infra/README.md).

Order, enforced with depends_on: Monitoring first (it installs the PodMonitor/ServiceMonitor/PrometheusRule
CRDs every other component uses; each component installs its operator's CRDs, infra/components/crds.py),
then the Spark platform (the jobs' namespace), then Kafka (its users live in the jobs' namespace), then the
jobs and the lag exporter, which install our own charts (charts/streaming-job, charts/lag-exporter). With
`streamstack:cdc` (and its password secret), the in-cluster PostgreSQL follows the Spark platform, Kafka
Connect follows Kafka and the database, and the lag exporter follows Connect (it mounts Connect's database
Secret to read the replication slot). Every component gets the one explicit Kubernetes provider.
"""

import dataclasses

import pulumi
import pulumi_kubernetes as kubernetes

from contracts.cdc import cdc_source
from contracts.pipeline import load_pipeline
from infra import config as stack_config
from infra.components.kafka_ca import KafkaClusterCa, KafkaClusterCaArgs
from infra.components.kafka_cluster import KafkaCluster, KafkaClusterArgs
from infra.components.kafka_connect import CONNECT_NAME, CREDENTIALS_SECRET, KafkaConnect, KafkaConnectArgs
from infra.components.kafka_connect import PASSWORD_KEY as CONNECT_PASSWORD_KEY
from infra.components.lag_exporter import LagExporter, LagExporterArgs, SlotSource, slot_source
from infra.components.monitoring import GRAFANA_ADMIN_PASSWORD_KEY, Monitoring, MonitoringArgs
from infra.components.postgres import Postgres, PostgresArgs
from infra.components.spark_platform import SparkPlatform, SparkPlatformArgs
from infra.components.streaming_job import StreamingJob, StreamingJobArgs
from infra.kafka_access import KafkaClient, KafkaUserSpec, exporter_user, job_user, load_generator_user
from infra.network import LOAD_GENERATOR_POD_LABELS, DatabasePeer, Peers

config = stack_config.load()
grafana_admin_password = stack_config.grafana_admin_password()  # None: the grafana chart generates one
alerting_secrets = stack_config.alerting_secrets(config.alerting)  # notifier -> URL or key, Pulumi secrets
cdc_password = stack_config.cdc_database_password(config.cdc.enabled)  # None: CDC left out, with a warning
cluster, kafka_config, spark_config = config.cluster, config.kafka, config.spark
provider = kubernetes.Provider("kubernetes", context=cluster.kubeconfig_context)


def after(*dependencies: pulumi.Resource) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(provider=provider, depends_on=list(dependencies))


monitoring_namespace = config.monitoring.namespace
api_server_cidrs = cluster.api_server_cidrs
peers = Peers.of(kafka_config, monitoring_namespace, api_server_cidrs)
scrape_ports = {job.metrics_port for job in config.jobs}
if config.lag_exporter.enabled:
    scrape_ports.add(config.lag_exporter.port)
monitoring = Monitoring(
    "monitoring",
    MonitoringArgs(
        monitoring=config.monitoring,
        scrape_ports=tuple(sorted(scrape_ports)),
        grafana_admin_password=grafana_admin_password,
        api_server_cidrs=api_server_cidrs,
        node_cidrs=cluster.node_cidrs,
        alerting=config.alerting,
        alerting_secrets=alerting_secrets,
    ),
    after(),
)
spark = SparkPlatform(
    "spark",
    SparkPlatformArgs(
        spark=spark_config, monitoring_namespace=monitoring_namespace, api_server_cidrs=api_server_cidrs
    ),
    after(monitoring),
)

job_users = {job.name: job_user(job, spark_config.shadow_group_prefix) for job in config.jobs}
exporter = exporter_user([topic.name for topic in config.topics], spark_config.shadow_group_prefix)
users = (*job_users.values(), exporter) if config.lag_exporter.enabled else tuple(job_users.values())
load_generator = load_generator_user(config.jobs) if config.load_generator.enabled else None
kafka = KafkaCluster(
    "kafka",
    KafkaClusterArgs(
        kafka=kafka_config,
        topics=config.topics,
        users=users,
        users_namespace=spark_config.jobs_namespace,
        monitoring_namespace=monitoring_namespace,
        load_generator=load_generator,
        api_server_cidrs=api_server_cidrs,
    ),
    after(monitoring, spark),
)
# With kafka.clientTls the clients use the TLS listener and trust the cluster CA, copied into their namespace.
kafka_ca = (
    KafkaClusterCa(
        "kafka-ca",
        KafkaClusterCaArgs(
            kafka=kafka_config, namespace=spark_config.jobs_namespace, kafka_resource=kafka.kafka
        ),
        after(spark, kafka),
    )
    if kafka_config.client_tls
    else None
)
kafka_ca_secret = kafka_ca.secret_name if kafka_ca is not None else None
clients_after = (kafka, kafka_ca) if kafka_ca is not None else (kafka,)


def kafka_client(user: KafkaUserSpec) -> KafkaClient:
    return KafkaClient(
        bootstrap_servers=kafka_config.bootstrap_servers,
        user_secret=user.secret_name,
        ca_secret=kafka_ca_secret,
    )


jobs = [
    StreamingJob(
        job.name,
        StreamingJobArgs(
            job=job,
            spark=spark_config,
            kafka=kafka_client(job_users[job.name]),
            cluster_nodes=cluster.nodes,
            peers=peers,
        ),
        after(spark, *clients_after),
    )
    for job in config.jobs
]
# Change data capture (streamstack:cdc): Kafka Connect + Debezium reading an in-cluster or external
# PostgreSQL.
cdc = config.cdc
exporter_source: SlotSource | None = None  # the replication slot the lag exporter reads, with CDC
exporter_after: tuple[pulumi.Resource, ...] = ()
if cdc.enabled and cdc.connect is not None and cdc_password is not None:
    source = cdc_source()
    database = cdc.database
    database_after: tuple[pulumi.Resource, ...] = ()
    if database.in_cluster is not None:
        postgres = Postgres(
            "postgres",
            PostgresArgs(
                database=database.in_cluster,
                database_name=source.database,
                user=database.user,
                password=cdc_password,
                connect_namespace=spark_config.jobs_namespace,
                connect_name=CONNECT_NAME,
                workload=load_generator is not None,
                exporter=config.lag_exporter.enabled,
            ),
            after(monitoring, spark),
        )
        host, port, database_after = postgres.host, postgres.port, (postgres,)
        peer = DatabasePeer(port, namespace=database.in_cluster.namespace)
    else:
        assert database.external is not None
        external = database.external
        host, port = external.host, external.port
        peer = DatabasePeer(port, cidrs=external.cidrs)
        source = dataclasses.replace(source, database=external.database or source.database)
    kafka_connect = KafkaConnect(
        "kafka-connect",
        KafkaConnectArgs(
            connect=cdc.connect,
            kafka=kafka_config,
            source=source,
            namespace=spark_config.jobs_namespace,
            database_host=host,
            database_port=port,
            database_user=database.user,
            password=cdc_password,
            database_peer=peer,
            ca_secret=kafka_ca_secret,
            stack_topics=tuple(topic.name for topic in config.topics),
            kafka_resource=kafka.kafka,
            monitoring_namespace=monitoring_namespace,
        ),
        after(spark, *clients_after, *database_after),
    )
    # Where the application workload (jobs.producers.cdc_workload, libpq's PG* variables) finds the database.
    pulumi.export(
        "cdcDatabase",
        {
            "host": host,
            "port": port,
            "database": source.database,
            "user": database.user,
            "passwordSecret": CREDENTIALS_SECRET,
        },
    )
    pulumi.export(
        "cdcConnector", f"kubectl get kafkaconnector -n {spark_config.jobs_namespace} {source.connector_name}"
    )
    # The lag exporter reads the connector's replication slot, from what Connect is given (its Secret too).
    exporter_source = slot_source(
        source,
        database,
        host=host,
        port=port,
        peer=peer,
        password_secret=CREDENTIALS_SECRET,
        password_key=CONNECT_PASSWORD_KEY,
    )
    exporter_after = (kafka_connect,)
if config.lag_exporter.enabled:
    LagExporter(
        "lag-exporter",
        LagExporterArgs(
            exporter=config.lag_exporter,
            namespace=spark_config.jobs_namespace,
            kafka=kafka_client(exporter),
            shadow_group_prefix=spark_config.shadow_group_prefix,
            jobs=config.jobs,
            cluster_nodes=cluster.nodes,
            peers=peers,
            source=exporter_source,
        ),
        after(monitoring, *clients_after, *jobs, *exporter_after),
    )

pulumi.export("kafkaBootstrapServers", kafka.bootstrap_servers)
pulumi.export(
    "kafkaSecurity",
    f"{kafka_config.client_security_protocol} + SCRAM-SHA-512; each client's password is in its KafkaUser's "
    "Secret" + (f", the cluster CA in the Secret {kafka_ca_secret} (key ca.crt)" if kafka_ca_secret else ""),
)
if kafka_ca_secret is not None:
    pulumi.export("kafkaCaSecret", kafka_ca_secret)
pulumi.export("jobsNamespace", spark.jobs_namespace)
pulumi.export("jobs", [job.name for job in config.jobs])
pulumi.export("kubectlJobs", f"kubectl get sparkapplications -n {spark_config.jobs_namespace}")
pulumi.export("kubectlTopics", f"kubectl get kafkatopics -n {kafka_config.namespace}")
pulumi.export("kubectlUsers", f"kubectl get kafkausers -n {spark_config.jobs_namespace}")
if load_generator is not None:
    # Producers (jobs/producers) run in the jobs' namespace with these labels and this Secret's credentials.
    pulumi.export("loadGeneratorSecret", load_generator.secret_name)
    pulumi.export("loadGeneratorPodLabels", LOAD_GENERATOR_POD_LABELS)
    pulumi.export("loadGeneratorTopics", sorted(load_generator.topics_with("Write")))
    # What to run with them: the producers of pipeline.yaml that feed this stack's jobs, each as its module
    # and then its flags (`python3 -m <module> --bootstrap-servers <bootstrap> <flags>`).
    pipeline = load_pipeline()
    feeding = dict.fromkeys(name for job in config.jobs for name in pipeline.job(job.name).producers)
    commands = {name: [pipeline.producer(name).module, *pipeline.producer(name).flags] for name in feeding}
    pulumi.export("loadGeneratorCommands", commands)
pulumi.export(
    "grafanaPortForward",
    f"kubectl port-forward -n {monitoring_namespace} svc/{monitoring.grafana_service} 3000:80",
)
pulumi.export(
    "grafanaAdminPassword",
    f"kubectl get secret -n {monitoring_namespace} {monitoring.grafana_admin_secret} "
    f"-o jsonpath='{{.data.{GRAFANA_ADMIN_PASSWORD_KEY}}}' | base64 -d",
)
pulumi.export(
    "prometheusPortForward",
    f"kubectl port-forward -n {monitoring_namespace} svc/{monitoring.prometheus_service} 9090:9090",
)

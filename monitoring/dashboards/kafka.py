"""Streamstack / Kafka: topic throughput, partition offsets and consumer groups from the lag exporter, and
broker throughput and replication health from the brokers' own metrics, as Strimzi's metrics reporter
(`metricsConfig: {type: strimziMetricsReporter}`) names them: `kafka_server_brokertopicmetrics_
messagesinpersec_total`, as in Strimzi's strimzi-metrics-reporter dashboards. The local broker loads the same
reporter (streamstack/local/kafka.py), so every panel has data locally and in a cluster."""

from __future__ import annotations

from contracts.metrics import PARTITION_STATUSES, STATUS_CODES
from monitoring.dashboards.promql import GROUPS_OF_JOB, NAMESPACE, RATE_INTERVAL, per_group
from monitoring.dashboards.spec import Dashboard, Panel, Row, Target, Variable

TOPICS = 'namespace=~"$namespace", topic=~"$topic"'
# Broker topic metrics also have a series without `topic`: the broker's total over all topics.
BROKER_TOPICS = f'{TOPICS}, topic!=""'
GROUPS_ON_TOPICS = f'{GROUPS_OF_JOB}, topic=~"$topic"'
RECORDS_PER_SECOND = "suffix: records/s"

TOPIC_VARIABLE = Variable(
    name="topic",
    label="Topic",
    series='streamstack_lag_partition_latest_offset{namespace=~"$namespace"}',
    label_name="topic",
    description="Topics read by at least one consumer the lag exporter sees",
)

DASHBOARD = Dashboard(
    uid="streamstack-kafka",
    title="Streamstack / Kafka",
    description="Topic throughput, partition offsets, consumer groups (lag exporter), broker throughput and "
    "replication (Strimzi metrics reporter).",
    extra_variables=(TOPIC_VARIABLE,),
    rows=(
        Row(
            "Topics",
            (
                Panel(
                    "Records produced per second",
                    "Growth of each topic's end offsets (the lag exporter reads them every refresh).",
                    (
                        Target(
                            f"sum by (topic) (rate(streamstack_lag_partition_latest_offset{{{TOPICS}}}"
                            f"[{RATE_INTERVAL}]))",
                            "{{topic}}",
                        ),
                    ),
                    unit=RECORDS_PER_SECOND,
                ),
                Panel(
                    "Offsets retained",
                    "Latest minus earliest offset per topic: the records Kafka keeps (an upper bound for "
                    "compacted topics).",
                    (
                        Target(
                            f"sum by (topic) (streamstack_lag_partition_latest_offset{{{TOPICS}}} "
                            f"- streamstack_lag_partition_earliest_offset{{{TOPICS}}})",
                            "{{topic}}",
                        ),
                    ),
                ),
                Panel(
                    "Broker messages in per second",
                    "Messages the brokers append per topic (kafka_server_brokertopicmetrics_"
                    "messagesinpersec_total, Strimzi metrics reporter).",
                    (
                        Target(
                            "sum by (topic) (rate(kafka_server_brokertopicmetrics_messagesinpersec_total"
                            f"{{{BROKER_TOPICS}}}[{RATE_INTERVAL}]))",
                            "{{topic}}",
                        ),
                    ),
                    unit=RECORDS_PER_SECOND,
                ),
                Panel(
                    "Broker bytes in and out per second",
                    "Bytes produced to and fetched from each topic (kafka_server_brokertopicmetrics_"
                    "bytes{in,out}persec_total; replication excluded).",
                    (
                        Target(
                            "sum by (topic) (rate(kafka_server_brokertopicmetrics_bytesinpersec_total"
                            f"{{{BROKER_TOPICS}}}[{RATE_INTERVAL}]))",
                            "{{topic}} in",
                        ),
                        Target(
                            "sum by (topic) (rate(kafka_server_brokertopicmetrics_bytesoutpersec_total"
                            f"{{{BROKER_TOPICS}}}[{RATE_INTERVAL}]))",
                            "{{topic}} out",
                        ),
                    ),
                    unit="Bps",
                ),
            ),
        ),
        Row(
            "Partition offsets",
            (
                Panel(
                    "Latest offset by partition",
                    "The offset the next record appended to each partition will get.",
                    (
                        Target(
                            "max by (topic, partition) "
                            f"(streamstack_lag_partition_latest_offset{{{TOPICS}}})",
                            "{{topic}}/{{partition}}",
                        ),
                    ),
                ),
                Panel(
                    "Earliest offset by partition",
                    "The earliest offset each partition still keeps; it moves with retention and compaction.",
                    (
                        Target(
                            "max by (topic, partition) "
                            f"(streamstack_lag_partition_earliest_offset{{{TOPICS}}})",
                            "{{topic}}/{{partition}}",
                        ),
                    ),
                ),
            ),
        ),
        Row(
            "Consumer groups",
            (
                Panel(
                    "Committed offset by group and topic",
                    "Sum over partitions of each consumer's committed position (for Spark checkpoints: the "
                    "end offsets of the last committed batch).",
                    (
                        Target(
                            "sum by (source, group, topic) "
                            f"(streamstack_lag_committed_offset{{{GROUPS_ON_TOPICS}}})",
                            "{{group}} ({{source}}) {{topic}}",
                        ),
                    ),
                ),
                Panel(
                    "Lag in records by group and topic",
                    "Latest minus committed offset, summed over partitions; never negative.",
                    (
                        Target(
                            f"sum by (source, group, topic) (streamstack_lag_records{{{GROUPS_ON_TOPICS}}})",
                            "{{group}} ({{source}}) {{topic}}",
                        ),
                    ),
                ),
                Panel(
                    "Consumed records per second by group",
                    "Rate at which each consumer commits, over the exporter's window.",
                    (
                        Target(
                            "sum by (source, group, topic) "
                            f"(streamstack_lag_consumed_records_per_second{{{GROUPS_ON_TOPICS}}})",
                            "{{group}} ({{source}}) {{topic}}",
                        ),
                    ),
                    unit=RECORDS_PER_SECOND,
                ),
                Panel(
                    "Partitions not OK by status",
                    "Partitions in each Burrow-style status other than OK: WARN (lag growing), STOP (no "
                    "commits while lagging), STALL (same offset committed while lagging), REWIND.",
                    tuple(
                        Target(
                            f"sum by (source, group) (streamstack_lag_status_code{{{GROUPS_ON_TOPICS}}}"
                            f" == bool {STATUS_CODES[status]})",
                            f"{{{{group}}}} ({{{{source}}}}) {status}",
                        )
                        for status in PARTITION_STATUSES
                        if status != "OK"
                    ),
                ),
                Panel(
                    "Group status",
                    "Burrow-style group status: 1 OK, 2 WARN, 3 ERR.",
                    per_group("max", "streamstack_lag_group_status_code"),
                    threshold=3,
                    width=24,
                ),
            ),
        ),
        Row(
            "Replication (brokers)",
            (
                Panel(
                    "Under-replicated partitions",
                    "Partitions each broker leads whose followers are out of sync "
                    "(kafka_server_replicamanager_underreplicatedpartitions).",
                    (
                        Target(
                            "sum by (pod) "
                            f"(kafka_server_replicamanager_underreplicatedpartitions{{{NAMESPACE}}})",
                            "{{pod}}",
                        ),
                    ),
                    threshold=1,
                    width=8,
                ),
                Panel(
                    "Offline partitions",
                    "Partitions without a leader, reported by the active controller "
                    "(kafka_controller_kafkacontroller_offlinepartitionscount).",
                    (
                        Target(
                            f"sum(kafka_controller_kafkacontroller_offlinepartitionscount{{{NAMESPACE}}})",
                            "offline",
                        ),
                    ),
                    kind="stat",
                    threshold=1,
                    width=8,
                ),
                Panel(
                    "Partitions under min ISR",
                    "Partitions with fewer in-sync replicas than min.insync.replicas: acks=all producers "
                    "fail (kafka_cluster_partition_underminisr).",
                    (
                        Target(
                            f"sum by (topic) (kafka_cluster_partition_underminisr{{{TOPICS}}})",
                            "{{topic}}",
                        ),
                    ),
                    threshold=1,
                    width=8,
                ),
            ),
        ),
    ),
)

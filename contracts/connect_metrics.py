"""The Prometheus JMX exporter's rules for Kafka Connect with Debezium, described once.

The cluster's Strimzi `KafkaConnect` gets them in its `metricsConfig` ConfigMap
(infra/components/kafka_connect.py) and the local Connect worker runs the same exporter as a Java agent
with the same rules (streamstack/local/connect.py), so alerts, dashboards and `streamstack status` read the
same names everywhere (Strimzi's example kafka-connect-metrics.yaml, narrowed):

- `kafka_connect_connector_status{connector, status}` and
  `kafka_connect_connector_task_status{connector, task, status}`: 1 for the current state (`running`,
  `paused`, `failed`, `unassigned`, `restarting`, ...) of each connector and task;
- `kafka_connect_worker_<metric>`: the worker's connector and task counts;
- `debezium_metrics_<attribute>{plugin, context, name}`: Debezium's connector metrics, lower case
  (streaming: `millisecondsbehindsource`, `connected`, `totalnumberofeventsseen`, ...; snapshot:
  `snapshotrunning`, ...). `name` is the connector's `topic.prefix`.
"""

from __future__ import annotations

from typing import Any

CONNECTOR_STATUS = "kafka_connect_connector_status"
TASK_STATUS = "kafka_connect_connector_task_status"
DEBEZIUM_PREFIX = "debezium_metrics_"
MILLISECONDS_BEHIND_SOURCE = DEBEZIUM_PREFIX + "millisecondsbehindsource"
CONNECTED = DEBEZIUM_PREFIX + "connected"
# A connector's or task's `status` label when it failed (Kafka Connect's state, lower case).
FAILED = "failed"


def jmx_exporter_rules() -> dict[str, Any]:
    """The JMX exporter's configuration (a fresh dict: callers may dump or change it)."""
    return {
        "lowercaseOutputName": True,
        "lowercaseOutputLabelNames": True,
        "rules": [
            {
                "pattern": "kafka.connect<type=connector-metrics, connector=(.+)><>status: ([a-z-]+)",
                "name": CONNECTOR_STATUS,
                "value": 1,
                "labels": {"connector": "$1", "status": "$2"},
                "type": "GAUGE",
            },
            {
                "pattern": (
                    "kafka.connect<type=connector-task-metrics, connector=(.+), task=(.+)><>status: ([a-z-]+)"
                ),
                "name": TASK_STATUS,
                "value": 1,
                "labels": {"connector": "$1", "task": "$2", "status": "$3"},
                "type": "GAUGE",
            },
            {
                "pattern": "kafka.connect<type=connect-worker-metrics><>([a-z-]+): (.+)",
                "name": "kafka_connect_worker_$1",
                "type": "GAUGE",
            },
            {
                "pattern": (
                    "debezium.([^:]+)<type=connector-metrics, context=([^,]+), server=([^,]+), task=([^>]+)>"
                    "<>([^:]+)"
                ),
                "name": DEBEZIUM_PREFIX + "$5",
                "labels": {"plugin": "$1", "context": "$2", "name": "$3", "task": "$4"},
            },
            {
                "pattern": (
                    "debezium.([^:]+)<type=connector-metrics, context=([^,]+), server=([^>]+)><>([^:]+)"
                ),
                "name": DEBEZIUM_PREFIX + "$4",
                "labels": {"plugin": "$1", "context": "$2", "name": "$3"},
            },
        ],
    }

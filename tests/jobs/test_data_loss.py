"""The lost-input explanation from Spark's failure text (captured from Spark 4.3's Kafka source with
failOnDataLoss) and what Kafka keeps; the live faults are in tests/faults/test_data_loss.py."""

from __future__ import annotations

from jobs.common.config import StreamingJobConfig
from jobs.common.data_loss import (
    LostRange,
    committed_offsets,
    explain_data_loss,
    is_data_loss,
    lost_ranges,
)
from jobs.common.failures import lost_input
from streamstack.local.ports import free_port

RETENTION_FAILURE = """[STREAM_FAILED] Query [id = b10d6970, runId = bd53d2aa] terminated with exception: \
Some data may have been lost because they are not available in Kafka any more;
either the data was aged out by Kafka or the topic may have been deleted before all the data in the
topic was processed.
If you don't want your streaming query to fail on such cases, set the source option failOnDataLoss to false.
Reason: Could not read records in offset [100, 200) for topic partition in-0
with consumer group spark-kafka-source-6a93cc7d-executor. SQLSTATE: XXKST
=== Streaming Query ===
Identifier: clickstream-windows.dead-letters [id = b10d6970, runId = bd53d2aa]
Current Committed Offsets: {KafkaV2[Subscribe[in]]: {"in":{"0":100,"1":100}}}
Current Available Offsets: {KafkaV2[Subscribe[in]]: {"in":{"0":200,"1":200}}}
"""

DELETED_TOPIC_FAILURE = """[STREAM_FAILED] Query [id = 4c34bbd1] terminated with exception: \
org.apache.kafka.common.errors.UnknownTopicOrPartitionException: \
This server does not host this topic-partition.
=== Streaming Query ===
Identifier: clickstream-windows [id = 4c34bbd1, runId = 118ca37a]
Current Committed Offsets: {KafkaV2[Subscribe[in, other]]: {"in":{"0":100,"1":97},"other":{"0":5}}}
Current Available Offsets: {KafkaV2[Subscribe[in, other]]: {"in":{"0":100,"1":97},"other":{"0":5}}}
"""


def test_spark_data_loss_failures_are_recognised_and_others_are_not() -> None:
    assert is_data_loss(RETENTION_FAILURE) and is_data_loss(DELETED_TOPIC_FAILURE)
    assert not is_data_loss("[STREAM_FAILED] ... java.io.IOException: No space left on device")


def test_committed_offsets_are_read_from_the_failure_text() -> None:
    assert committed_offsets(RETENTION_FAILURE) == {"in": {0: 100, 1: 100}}
    assert committed_offsets(DELETED_TOPIC_FAILURE) == {"in": {0: 100, 1: 97}, "other": {0: 5}}
    assert committed_offsets("no streaming query section") == {}


def test_lost_ranges_compare_committed_offsets_with_what_kafka_keeps() -> None:
    committed = committed_offsets(DELETED_TOPIC_FAILURE)
    retention = lost_ranges(committed, {"in", "other"}, {("in", 0): 150, ("in", 1): 97, ("other", 0): 0})
    assert retention == [LostRange("in", 0, 100, 150)]
    deleted = lost_ranges(committed, {"other"}, {("other", 0): 0})
    assert deleted == [LostRange("in", 0, 100, None), LostRange("in", 1, 97, None)]
    assert lost_ranges(committed, {"in", "other"}, {}) == []


def test_the_explanation_names_topic_partition_offsets_and_the_resume() -> None:
    line = explain_data_loss(RETENTION_FAILURE, [LostRange("in", 0, 100, 150)])
    assert "topic 'in' partition 0: offsets 100 to 149" in line
    assert "--accept-data-loss" in line and "monitoring/rules/README.md#streamstackconsumerdataloss" in line
    assert "\n" not in line
    deleted = explain_data_loss(DELETED_TOPIC_FAILURE, [LostRange("in", 1, 97, None)])
    assert "topic 'in' was deleted: partition 1 from offset 97" in deleted
    # Kafka already moved on (say, the partition was re-created): Spark's own reason is kept.
    fallback = explain_data_loss(RETENTION_FAILURE, [])
    assert "Could not read records in offset [100, 200) for topic partition in-0" in fallback


def test_with_kafka_unreachable_the_line_keeps_sparks_reason_and_raises_nothing() -> None:
    """The explanation runs while the driver handles a failure: it must not raise a second error."""
    unreachable = StreamingJobConfig(
        query_name="clickstream-windows",
        bootstrap_servers=f"127.0.0.1:{free_port()}",
        checkpoint_dir="/mnt/checkpoints",
        metrics_port=0,
        dead_letter_topic="dead-letters",
    )
    line = lost_input(RETENTION_FAILURE, unreachable)
    assert line is not None
    assert "Could not read records in offset [100, 200) for topic partition in-0" in line

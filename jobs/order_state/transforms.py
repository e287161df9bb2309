"""Pure DataFrame -> DataFrame steps of the order-state job: decode order events, fold each order's events
into its state by the rules of jobs.order_state.state_machine (in the JVM: jobs.jvm.order_states), encode
the states and the rejected events as Kafka records."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

from contracts.record_sizes import MAX_DEAD_LETTER_DETAIL_CHARS
from jobs.common.changelog import decode_changelog
from jobs.common.config import EventLimits
from jobs.common.encoding import iso_millis, json_value, kafka_header, record_position, source_headers
from jobs.common.events import EventField, EventSchema
from jobs.common.progress import OBSERVED_DEAD_LETTERS
from jobs.common.schemas import AMOUNT_LIMIT, as_amount
from jobs.jvm.order_states import fold_orders_in_jvm
from jobs.order_state.state_machine import AMOUNT_EVENTS, EVENT_TYPES, REJECTION_REASONS

ORDER_EVENT = EventSchema(
    "order-event",
    (
        EventField("event_id", "string"),
        EventField("order_id", "string"),
        EventField("type", "string"),
        EventField("event_time", "timestamp"),
        EventField("amount", "double", required=False),
    ),
    event_time_field="event_time",
)
ORDER_KEY_FIELD = "order_id"

_TIME_COLUMNS = ("placed_at", "paid_at", "shipped_at", "delivered_at", "returned_at", "amount_corrected_at")


def decode_order_events(kafka_records: DataFrame, limits: EventLimits) -> DataFrame:
    """Order event records with a typed event or a dead-letter reason: `decode_events`' checks, then the
    record key must be the order id (`missing_key`, `key_mismatch`: an order's events must share one
    partition to be folded in log order), the type one of EVENT_TYPES (`out_of_range`), an amount present
    for OrderPlaced and AmountCorrected (`missing_field`) and, where present, from 0 to AMOUNT_LIMIT
    (`out_of_range`)."""
    decoded = decode_changelog(kafka_records, ORDER_EVENT, ORDER_KEY_FIELD, limits)
    ok = F.col("dead_letter_reason").isNull()
    event_type, amount = F.col("event.type"), F.col("event.amount")
    unknown_type = ok & ~event_type.isin(*EVENT_TYPES)
    missing_amount = ok & event_type.isin(*AMOUNT_EVENTS) & amount.isNull()
    bad_amount = ok & amount.isNotNull() & ((amount < 0) | as_amount(amount).isNull())
    problems: list[tuple[Column, str, Column]] = [
        (
            unknown_type,
            "out_of_range",
            F.format_string(f"field 'type' is %s, expected one of {', '.join(EVENT_TYPES)}", event_type),
        ),
        (
            missing_amount,
            "missing_field",
            F.format_string("field 'amount' is missing or null for %s", event_type),
        ),
        (
            bad_amount,
            "out_of_range",
            F.format_string(f"field 'amount' is %s, expected 0 to {AMOUNT_LIMIT:.0e}", amount.cast("string")),
        ),
    ]
    reason, detail = F.col("dead_letter_reason"), F.col("dead_letter_detail")
    for condition, code, message in reversed(problems):
        reason = F.when(condition, F.lit(code)).otherwise(reason)
        detail = F.when(condition, message).otherwise(detail)
    return decoded.withColumns(
        {
            "event": F.when(reason.isNull(), F.col("event")),
            "dead_letter_reason": reason,
            "dead_letter_detail": detail,
        }
    )


def order_events(decoded: DataFrame) -> DataFrame:
    """The valid events, with their event time as ISO text and their record (key, value, position,
    timestamp) for the dead letter of a rejected one."""
    return decoded.where(F.col("dead_letter_reason").isNull()).select(
        F.col("event.order_id").alias("order_id"),
        F.col("event.event_id").alias("event_id"),
        F.col("event.type").alias("type"),
        iso_millis("event.event_time").alias("event_time"),
        F.col("event.amount").alias("amount"),
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("timestamp_ms"),
    )


def fold_orders(events: DataFrame) -> DataFrame:
    """Each order's events folded into its state, kept in Spark state across batches (no timeout: an
    order's state is kept for as long as the job runs, see the runbook)."""
    return fold_orders_in_jvm(events)


_HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def order_state_records(
    folded: DataFrame, output_topic: str, dead_letter_topic: str, query: str
) -> DataFrame:
    """Kafka rows with their `topic`: each new state to the output topic keyed by order id, each rejected
    event to the dead-letter topic in the dead-letter format of jobs.common.events.dead_letter_records (the
    raw record keyed by its position, the reason, detail, query and origin in headers); the rejections of
    each batch counted by reason as the observed metric `dead_letters`.

    One projection, not a union of two filtered branches: each branch would run the stateful fold."""
    is_state = F.col("kind") == "state"
    state_value = json_value(
        "order_id",
        "status",
        "amount",
        "version",
        *_TIME_COLUMNS,
        "updated_at",
        "last_event_id",
        keep_nulls=True,
    )
    detail = F.left(F.col("dead_letter_detail"), F.lit(MAX_DEAD_LETTER_DETAIL_CHARS))
    dead_letter_headers = F.array(
        kafka_header("dead_letter.reason", F.col("dead_letter_reason")),
        kafka_header("dead_letter.detail", detail),
        kafka_header("dead_letter.query", F.lit(query)),
        *source_headers(timestamp=True),
    )
    records = folded.withColumn("timestamp", F.timestamp_millis("timestamp_ms")).select(
        F.when(is_state, F.lit(output_topic)).otherwise(F.lit(dead_letter_topic)).alias("topic"),
        F.when(is_state, F.col("order_id").cast("binary"))
        .otherwise(record_position().cast("binary"))
        .alias("key"),
        F.when(is_state, state_value.cast("binary")).otherwise(F.col("value")).alias("value"),
        F.when(is_state, F.array().cast(_HEADERS)).otherwise(dead_letter_headers).alias("headers"),
        "dead_letter_reason",
    )
    reason = F.col("dead_letter_reason")
    counted = records.observe(
        OBSERVED_DEAD_LETTERS,
        *[F.sum(F.when(reason == code, 1).otherwise(0)).alias(code) for code in REJECTION_REASONS],
    )
    return counted.drop("dead_letter_reason")

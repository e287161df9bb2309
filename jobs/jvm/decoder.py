"""`decode_events_jvm`: `jobs.common.events.decode_events` with its checks done by the JVM `EventDecoder`.

Same input, same output columns, same reasons, details and typed events (tests/jobs/test_jvm_decoder.py
holds the two to each other). The JVM decoder is a Catalyst expression (`DecodeExpression`, registered in the
session's function registry as a temporary function per schema and limits): it does every check of a record
in one pass and returns the reason, the field it is about and the typed fields as Spark's internal row, with
no UDF converters and with generated code inside whole-stage code generation. The detail of a dead letter is
formatted here, in Spark SQL, for dead letters only, with the SQL decoder's expressions (the JSON type names
of `schema_of_variant`, the session time zone's timestamp text).

Needs the jar (`jobs.jvm.local_jar()` or `jobs.jvm.IMAGE_JAR`) on the classpath of the Spark driver and the
executors: spark.jars locally (jobs.common.session.jvm_jars), Spark's jars folder in the jobs image.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.jvm import EXPRESSION_CLASS
from jobs.jvm.gateway import jvm_class

if TYPE_CHECKING:  # jobs.common.events decodes with this module
    from jobs.common.config import EventLimits
    from jobs.common.events import EventField, EventSchema

_MICROS = 1_000_000
_VERDICT = "__jvm_decode"
# EventDecoder's field index of a malformed_json verdict when the value is JSON followed by more text.
_TEXT_AFTER = -2


def decoder_spec(schema: EventSchema, limits: EventLimits) -> str:
    """The spec string EventDecoder parses: limits, tombstones, the event-time field and the fields."""
    names = [f.name for f in schema.fields]
    time_index = names.index(schema.event_time_field) if schema.event_time_field is not None else -1
    fields = ",".join(f"{f.name}:{f.kind}:{int(f.required)}" for f in schema.fields)
    return ";".join(
        [
            str(limits.max_event_bytes),
            str(limits.max_event_future_seconds * _MICROS),
            str(limits.max_event_age_seconds * _MICROS),
            str(int(schema.tombstones_allowed)),
            str(time_index),
            fields,
        ]
    )


def register_decoder(spark: SparkSession, schema: EventSchema, limits: EventLimits) -> str:
    """Register the decoder expression for this schema and these limits in the session's function registry
    (a temporary function of (value, timestamp)); its function name."""
    spec = decoder_spec(schema, limits)
    name = f"streamstack_decode_{hashlib.sha256(spec.encode()).hexdigest()[:16]}"
    expression = jvm_class(spark, EXPRESSION_CLASS)
    expression.register(spark._jsparkSession.sessionState().functionRegistry(), name, spec)
    return name


def _field_detail(index: int, field: EventField, reason: Column, text: Column) -> list[tuple[Column, Column]]:
    """(condition, detail) of the dead letters about one field, as the SQL decoder words them."""
    name = field.name
    field_variant = F.try_variant_get(F.try_parse_json(text), f"$.{name}", "variant")
    field_text = F.try_variant_get(F.try_parse_json(text), f"$.{name}", "string")
    details = [
        (reason == "missing_field", F.lit(f"field '{name}' is missing or null")),
        (
            reason == "wrong_type",
            F.format_string(
                f"field '{name}' is %s, expected {field.kind}", F.schema_of_variant(field_variant)
            ),
        ),
    ]
    if field.kind == "timestamp":
        # The SQL decoder quotes the text as a one-field struct named after its own temporary column.
        quoted = F.to_json(F.struct(field_text.alias(f"__decode_text_{index}")))
        details.append(
            (
                reason == "bad_timestamp",
                F.format_string(f"field '{name}' is %s, expected ISO-8601 with a zone", quoted),
            )
        )
    return details


def decode_events_jvm(kafka_records: DataFrame, schema: EventSchema, limits: EventLimits) -> DataFrame:
    """Kafka records plus `event`, `dead_letter_reason` and `dead_letter_detail`, as `decode_events`."""
    name = register_decoder(kafka_records.sparkSession, schema, limits)
    value = F.col("value")
    verdict = F.col(_VERDICT)
    # The decoder in a projection of its own: the columns below refer to its result many times.
    staged = kafka_records.select("*", F.call_function(name, value, F.col("timestamp")).alias(_VERDICT))
    reason = verdict.getField("reason")
    field_index = verdict.getField("field")
    text = value.cast("string")

    def typed(index: int, field: EventField) -> Column:
        column = verdict.getField(f"f{index}")
        return F.timestamp_micros(column) if field.kind == "timestamp" else column

    details: list[tuple[Column, Column]] = [
        (reason == "empty", F.lit("record has no value")),
        (
            reason == "oversized",
            F.format_string(f"value is %d bytes, limit {limits.max_event_bytes}", F.octet_length(value)),
        ),
        (reason == "not_utf8", F.lit("value is not valid UTF-8")),
        (
            (reason == "malformed_json") & (field_index == _TEXT_AFTER),
            F.lit("value has text after its JSON value"),
        ),
        (reason == "malformed_json", F.lit("value is not valid JSON")),
        (
            reason == "not_an_object",
            F.format_string(
                "value is %s, expected a JSON object", F.schema_of_variant(F.try_parse_json(text))
            ),
        ),
    ]
    for index, field in enumerate(schema.fields):
        details.extend(
            ((field_index == index) & condition, detail)
            for condition, detail in _field_detail(index, field, reason, text)
        )
    if schema.event_time_field is not None:
        time_index = next(i for i, f in enumerate(schema.fields) if f.name == schema.event_time_field)
        details.append(
            (
                reason == "event_time_out_of_range",
                F.format_string(
                    f"{schema.event_time_field} %s is more than {limits.max_event_future_seconds} s after or "
                    f"{limits.max_event_age_seconds} s before the record's Kafka timestamp %s",
                    typed(time_index, schema.fields[time_index]).cast("string"),
                    F.col("timestamp").cast("string"),
                ),
            )
        )
    detail: Column = F.lit(None).cast("string")
    for condition, message in reversed(details):
        detail = F.when(condition, message).otherwise(detail)

    event = F.struct(*[typed(i, f).alias(f.name) for i, f in enumerate(schema.fields)])
    return staged.select(
        *kafka_records.columns,
        F.when(reason.isNull() & value.isNotNull(), event).alias("event"),
        reason.alias("dead_letter_reason"),
        F.when(reason.isNotNull(), detail).alias("dead_letter_detail"),
    )

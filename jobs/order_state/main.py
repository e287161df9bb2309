"""Order state: each order's current state as the fold of its events (event sourcing).

Input:  `--input-topic`, order events, keyed by order id, value `{"event_id", "order_id", "type",
        "event_time", "amount"}`: type one of OrderPlaced, OrderPaid, OrderShipped, OrderDelivered,
        OrderReturned, AmountCorrected; amount (a number) only with OrderPlaced and AmountCorrected.
        The topic is the source of truth and is kept forever (retention.ms -1, cleanup.policy delete).
Output: `--output-topic` (compacted), keyed by order id, value `{"order_id", "status", "amount", "version",
        "placed_at", "paid_at", "shipped_at", "delivered_at", "returned_at", "amount_corrected_at",
        "updated_at", "last_event_id"}` (absent steps null): the fold of the order's events applied so
        far, written whenever a batch applies one. version is the number of events applied; the step
        times and updated_at are event times of the events that set them.
Rules:  jobs/order_state/state_machine.py, `apply_event`, with the table of possible transitions. An
        impossible event (shipped before paid, anything after returned, a second OrderPlaced, ...) is
        rejected: the state stays, the event goes to `--dead-letter-topic` as `invalid_transition` with a
        detail such as "OrderShipped before OrderPaid". A redelivered event (an event_id already applied
        to the order) is rejected as `duplicate_event`: redelivery is idempotent. Both are counted in
        `streamstack_query_dead_letters_total{query="<name>",reason}`.
Order:  events are folded in Kafka offset order within the partition, the log's order, NOT in event-time
        order: the log is the source of truth, and an order's events all sit in one partition (the key is
        the order id; a record whose key differs from its order_id is a `key_mismatch` dead letter). The
        event times are recorded, never sorted by. Within a micro-batch Spark hands a group's rows over
        in no guaranteed order, so the fold sorts them by (partition, offset) first.
        Do not add partitions to the input topic while orders are open: the key would map to another
        partition, and a batch holding an order's events from both could fold them out of order.
Why this topic cannot be compacted, when the CDC topics (users, orders) can: a CDC record is the whole
        row after the change, so the latest record per key IS the row and compaction loses nothing a
        reader needs. An order event is a change, not the state: compaction would keep only each order's
        last event (say OrderDelivered), and a replay would fold that one event into nothing (it is
        impossible without OrderPlaced and OrderPaid before it), losing the amount, the step times and
        the version. Time-based retention loses the same for orders older than it. So the events are
        kept forever, and the state is the compacted output, rebuilt from them at will.
How:    one stateful query `<name>`: decode, then `groupByKey(order_id).flatMapGroupsWithState` in the
        JVM (`streamstack.jvm.OrderStates`, Java; jobs.jvm.order_states), output mode update, NO timeout.
        The Java fold applies state_machine.py's rules, which stay the reference (the tests hold the two
        to the same verdicts, details and states) and which the order-event producer plans with. It was
        `applyInPandasWithState` with a Python fold until 2026-11-27: every batch then went through a
        Python worker per task, where a batch of a few events now starts none. A checkpoint of that
        version holds state of another schema, which Spark refuses at start: replay into a new checkpoint.
        An order's state (about 0.5 KB with its applied event ids) is kept as long as the job runs, so a
        returned order's state still rejects later events. Expiring final orders with a processing-time
        timeout would make a late event after the expiry look like a new order's first event (rejected
        "... before OrderPlaced") instead of "... after OrderReturned": the dead letter's reason would then
        depend on timing, and a replay would not reproduce it.
Dead letters: malformed records (bad JSON, missing or mistyped fields, `missing_key`, `key_mismatch`, an
        unknown type or an amount below 0 or beyond ±1e16 (`out_of_range`), an OrderPlaced or
        AmountCorrected without an amount (`missing_field`)) go to `--dead-letter-topic` from the query
        `<name>.dead-letters`; rejected events go there from `<name>` itself. Both in the one dead-letter
        format (jobs.common.events): the raw record keyed `<topic>/<partition>/<offset>`, the reason,
        detail, query and origin in headers.
State:  `<checkpoint dir>/<query name>` per query: offsets, commits and each order's state. A restart
        (even after SIGKILL) resumes from the last committed batch; a batch re-run after a failure starts
        from the state before it and writes the same records again (same keys, same values).
Replay: start with a new --checkpoint-dir (and, to compare, a new --output-topic) and --starting-offsets
        earliest: the whole log is folded again into the same states, and the same events are rejected.
Metrics and how to run it: as every job (jobs.common.runner); state rows and bytes per query in
        `streamstack_query_state_rows` / `streamstack_query_state_memory_bytes`.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.events import read_decoded_stream, start_dead_letter_query
from jobs.common.kafka_io import write_kafka_stream
from jobs.common.runner import StreamingJob
from jobs.order_state.config import OrderStateJobConfig
from jobs.order_state.transforms import decode_order_events, fold_orders, order_events, order_state_records


def start_queries(spark: SparkSession, config: OrderStateJobConfig) -> list[StreamingQuery]:
    """Start every query of the job; tests call this with their own topics and checkpoint root."""
    streaming = config.streaming
    decoded = read_decoded_stream(spark, streaming, config.input_topic, decode_order_events)
    records = order_state_records(
        fold_orders(order_events(decoded)),
        config.output_topic,
        streaming.dead_letter_topic,
        streaming.query_name,
    )
    state_query = write_kafka_stream(records, streaming, topic=None, output_mode="update")
    return [state_query, start_dead_letter_query(streaming, [decoded])]


JOB = StreamingJob("order-state", OrderStateJobConfig, start_queries, __doc__)
parse_args, main = JOB.parse_args, JOB.main

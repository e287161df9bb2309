"""`fold_orders_in_jvm`: order-state's fold, the JVM `OrderStates` (`flatMapGroupsWithState` keyed by order
id, no timeout, Java), where it was a pandas function: a batch of a few events then costs no Arrow round
trip through a Python worker per task. The rules are jobs/order_state/state_machine.py's, which the tests
hold the Java class to.

Needs the jobs' jar on the classpath of the driver and the executors, as `jobs.jvm.decoder` does.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from jobs.jvm.gateway import in_columns, jvm_class

ORDER_STATES_CLASS = "streamstack.jvm.OrderStates"

# OrderStates' input columns, in its order.
EVENT_COLUMNS = {
    "order_id": "string",
    "event_id": "string",
    "type": "string",
    "event_time": "string",
    "amount": "double",
    "key": "binary",
    "value": "binary",
    "topic": "string",
    "partition": "int",
    "offset": "long",
    "timestamp_ms": "long",
}


def fold_orders_in_jvm(events: DataFrame) -> DataFrame:
    """Per order and batch: each rejected event (kind 'rejected', its reason, detail and record) and the new
    state if an event was applied (kind 'state', with the last applied event's position)."""
    spark = events.sparkSession
    folded = jvm_class(spark, ORDER_STATES_CLASS).fold(in_columns(events, EVENT_COLUMNS, {})._jdf)
    return DataFrame(folded, spark)

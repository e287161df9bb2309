"""A foreachBatch function's failure, worded so that Spark reads it without overflowing the query's thread.

While a query is being stopped, Spark reads the message of an exception raised by a Python foreachBatch
function (`StreamExecution.isInterruptionException`) with a regex that recurses once per character after
"Py4JJavaError: An error occurred while calling", looking for an interruption. Our stop marks a query
still in its batch after half its grace period stopped (jobs/jvm GracefulStop), so a batch failing then hands
Spark the Java stack trace a Py4JJavaError carries: 1,500-2,000 characters overflow a driver thread's stack
(measured), the thread dies of a StackOverflowError, and the query looks stopped with its error lost (the
driver exits 0).
So an interruption is told in a few words that Spark still recognises as the stop, and any other failure
keeps its whole traceback, Java's included, without the words Spark's regex starts from.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.sql import DataFrame

BatchFunction = Callable[[DataFrame, int], None]

# What Spark counts as a stop's interruption (StreamExecution.IO_EXCEPTION_NAMES).
INTERRUPTIONS = frozenset(
    {
        "java.lang.InterruptedException",
        "java.io.InterruptedIOException",
        "java.nio.channels.ClosedByInterruptException",
    }
)
SPARK_INTERRUPTION_PREFIX = "Py4JJavaError: An error occurred while calling"
MAX_CAUSES = 16


class BatchFunctionError(RuntimeError):
    """A foreachBatch function failed."""


def py4j_error_in(error: BaseException) -> Py4JJavaError | None:
    """The Py4JJavaError the error is, or was raised from or while handling."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, Py4JJavaError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def java_exception_classes(java_exception: Any) -> list[str]:
    """The Java exception's class and its causes' classes, outermost first."""
    classes: list[str] = []
    current = java_exception
    while current is not None and len(classes) < MAX_CAUSES:
        classes.append(current.getClass().getName())
        current = current.getCause()
    return classes


def batch_error_message(error: BaseException) -> str:
    """What Spark gets for a failed batch function: an interruption in Py4J's own words, short; anything else
    its whole traceback, with Py4J's words reworded so that Spark's regex never starts on it."""
    java_error = py4j_error_in(error)
    if java_error is not None:
        classes = java_exception_classes(java_error.java_exception)
        if INTERRUPTIONS.intersection(classes):
            return f"py4j.protocol.Py4JJavaError: {java_error.errmsg.strip()}\n: {' <- '.join(classes)}"
    whole = "".join(traceback.format_exception(error)).rstrip()
    return whole.replace(SPARK_INTERRUPTION_PREFIX, "Py4JJavaError: an error occurred while calling")


def reporting_failures(process: BatchFunction) -> BatchFunction:
    """`process`, raising a BatchFunctionError worded by `batch_error_message` when it fails."""

    def run(batch: DataFrame, batch_id: int) -> None:
        try:
            process(batch, batch_id)
        except Exception as error:
            raise BatchFunctionError(batch_error_message(error)) from None

    return run

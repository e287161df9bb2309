"""A failed query's error told in one line, when the job can name what went wrong and where.

Spark's own error for a query is long (its plan, offsets, a JVM stack trace) and may not say where it failed:
a full checkpoint filesystem ends a query with "java.io.IOException: No space left on device" and no path.
Each classifier reads the failure text (Spark's message, then the JVM stack trace with its causes) and the
job's settings, and returns one line or None; `explain_query_failure` tries them in order. Add a classifier
to CLASSIFIERS for another failure the job can explain.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from kafka.errors import KafkaError

from jobs.common.config import StreamingJobConfig
from jobs.common.data_loss import committed_offsets, explain_data_loss, is_data_loss, lost_ranges
from jobs.common.kafka_io import earliest_kept_offsets

FailureClassifier = Callable[[str, StreamingJobConfig], str | None]

# A frame of Spark writing a checkpoint file: the atomic output stream of its checkpoint file manager (offset
# and commit logs, state store files), or creating one.
_CHECKPOINT_WRITE = re.compile(
    r"\bat org\.apache\.spark\.sql\.execution\.streaming\.checkpointing\."
    r"\w*CheckpointFileManager\S*(?:OutputStream|createAtomic)"
)
_QUERY_NAME = re.compile(r"^Identifier: (\S+) \[id = ", re.MULTILINE)
_INNERMOST_CAUSE = re.compile(r"^Caused by: [\w.$]+: (.+)$", re.MULTILINE)
_TERMINATED_WITH = re.compile(r"terminated with exception: [\w.$]+: (.+?)(?: SQLSTATE: \w+)?$", re.MULTILINE)


def failure_text(error: BaseException) -> str:
    """A query failure's message and, when PySpark kept it, the JVM stack trace with its causes, which alone
    says where Spark failed (PySpark shows it in str() only with spark.sql.pyspark.jvmStacktrace.enabled)."""
    message = str(error)
    stack = getattr(error, "_stackTrace", None)
    if isinstance(stack, str) and stack not in message:
        return f"{message}\n\nJVM stacktrace:\n{stack}"
    return message


def checkpoint_write_failure(failure: str, streaming: StreamingJobConfig) -> str | None:
    """A checkpoint file could not be written (a full or read-only filesystem, permissions): the query's
    checkpoint directory and the operating system's reason."""
    if _CHECKPOINT_WRITE.search(failure) is None:
        return None
    causes = _INNERMOST_CAUSE.findall(failure) or _TERMINATED_WITH.findall(failure)
    reason = causes[-1].strip() if causes else "see Spark's error above"
    query = _QUERY_NAME.search(failure)
    where = streaming.checkpoint_for(query.group(1)) if query else streaming.checkpoint_dir
    return (
        f"checkpoint write failed under {where}: {reason} (the checkpoint keeps its last complete batch; "
        "fix this and restart the job to resume from there)"
    )


def lost_input(failure: str, streaming: StreamingJobConfig) -> str | None:
    """Spark's failOnDataLoss: input records gone before the query read them, compared with what Kafka
    keeps now (jobs.common.data_loss)."""
    if not is_data_loss(failure):
        return None
    committed = committed_offsets(failure)
    try:
        existing, earliest = earliest_kept_offsets(streaming, sorted(committed))
    except KafkaError:
        return explain_data_loss(failure, [])  # Kafka unreachable: Spark's reason, never a second error
    return explain_data_loss(failure, lost_ranges(committed, existing, earliest))


CLASSIFIERS: tuple[FailureClassifier, ...] = (checkpoint_write_failure, lost_input)


def explain_query_failure(
    failure: str, streaming: StreamingJobConfig, classifiers: Sequence[FailureClassifier] = CLASSIFIERS
) -> str | None:
    """The first classifier's line for this failure, or None when none knows it (Spark's error stands)."""
    for classify in classifiers:
        explanation = classify(failure, streaming)
        if explanation is not None:
            return explanation
    return None

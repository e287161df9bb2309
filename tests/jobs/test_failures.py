"""Failure explanations from Spark's failure text. DISK_FULL_FAILURE is what the window job's driver got
from awaitAnyTermination when its checkpoint filesystem filled up (tests/faults/test_checkpoint_disk_full.py),
as `failure_text` joins it: Spark 4.3's message (MESSAGE, all that str() shows), then the JVM stack trace,
which repeats the query section. Only the logical plan is left out; long lines are continued with a
backslash."""

from __future__ import annotations

from jobs.common.config import StreamingJobConfig
from jobs.common.failures import CLASSIFIERS, checkpoint_write_failure, explain_query_failure

QUERY_SECTION = """=== Streaming Query ===
Identifier: clickstream-windows.dead-letters [id = fd3c7836-1e23-4444-90cb-55909823e312, runId =\
 0fdbd0ad-2154-4b0e-8519-e64b1cbc0a46]
Current Committed Offsets: {KafkaV2[Subscribe[test-e6d08d95ea02-views]]:\
 {"test-e6d08d95ea02-views":{"0":1038,"1":962}}}
Current Available Offsets: {KafkaV2[Subscribe[test-e6d08d95ea02-views]]:\
 {"test-e6d08d95ea02-views":{"0":1286,"1":1213}}}

Current State: ACTIVE
Thread State: RUNNABLE

Logical Plan:
[the window job's plan, left out]"""

MESSAGE = (
    "[STREAM_FAILED] Query [id = fd3c7836-1e23-4444-90cb-55909823e312, "
    "runId = 0fdbd0ad-2154-4b0e-8519-e64b1cbc0a46] terminated with exception: "
    "java.io.IOException: No space left on device SQLSTATE: XXKST\n" + QUERY_SECTION
)

FRAMES = """\tat org.apache.spark.sql.execution.streaming.runtime.StreamExecution.org$apache$spark$sql\
$execution$streaming$runtime$StreamExecution$$runStream(StreamExecution.scala:394)
\tat org.apache.spark.sql.execution.streaming.runtime.StreamExecution$$anon$1.run(StreamExecution\
.scala:236)
Caused by: org.apache.hadoop.fs.FSError: java.io.IOException: No space left on device
\tat org.apache.hadoop.fs.RawLocalFileSystem$LocalFSFileOutputStream.write(RawLocalFileSystem\
.java:549)
\tat java.base/java.io.BufferedOutputStream.flushBuffer(BufferedOutputStream.java:81)
\tat java.base/java.io.BufferedOutputStream.flush(BufferedOutputStream.java:142)
\tat java.base/java.io.FilterOutputStream.close(FilterOutputStream.java:182)
\tat org.apache.hadoop.fs.FSDataOutputStream$PositionCache.close(FSDataOutputStream.java:77)
\tat org.apache.hadoop.fs.FSDataOutputStream.close(FSDataOutputStream.java:106)
\tat org.apache.hadoop.fs.ChecksumFs$ChecksumFSOutputSummer.close(ChecksumFs.java:395)
\tat org.apache.hadoop.fs.FSDataOutputStream$PositionCache.close(FSDataOutputStream.java:77)
\tat org.apache.hadoop.fs.FSDataOutputStream.close(FSDataOutputStream.java:106)
\tat org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager\
$RenameBasedFSDataOutputStream.close(CheckpointFileManager.scala:158)
\tat org.apache.spark.sql.execution.streaming.checkpointing.HDFSMetadataLog.write(HDFSMetadataLog\
.scala:211)
\tat org.apache.spark.sql.execution.streaming.checkpointing.HDFSMetadataLog.addNewBatchByStream\
(HDFSMetadataLog.scala:244)
\tat org.apache.spark.sql.execution.streaming.checkpointing.HDFSMetadataLog.add(HDFSMetadataLog\
.scala:137)
\tat org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution.markMicroBatchStart\
(MicroBatchExecution.scala:1453)
\tat org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution.$anonfun\
$constructNextBatch$15(MicroBatchExecution.scala:1149)
\tat scala.runtime.java8.JFunction0$mcV$sp.apply(JFunction0$mcV$sp.scala:18)
\tat org.apache.spark.sql.execution.streaming.runtime.ProgressContext.reportTimeTaken\
(ProgressReporter.scala:200)
\tat org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution.$anonfun\
$constructNextBatch$1(MicroBatchExecution.scala:1148)
\tat scala.runtime.java8.JFunction0$mcZ$sp.apply(JFunction0$mcZ$sp.scala:17)
\tat org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution.withProgressLocked\
(MicroBatchExecution.scala:1743)
\tat org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution.constructNextBatch\
(MicroBatchExecution.scala:1072)
\tat org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution.$anonfun\
$executeOneBatch$2(MicroBatchExecution.scala:747)
\tat scala.runtime.java8.JFunction0$mcV$sp.apply(JFunction0$mcV$sp.scala:18)
\tat org.apache.spark.sql.execution.streaming.runtime.ProgressContext.reportTimeTaken\
(ProgressReporter.scala:200)
\tat org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution.executeOneBatch\
(MicroBatchExecution.scala:736)
\tat org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution.$anonfun\
$runActivatedStream$1(MicroBatchExecution.scala:716)
\tat org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution.$anonfun\
$runActivatedStream$1$adapted(MicroBatchExecution.scala:716)
\tat org.apache.spark.sql.execution.streaming.runtime.TriggerExecutor.runOneBatch(TriggerExecutor\
.scala:40)
\tat org.apache.spark.sql.execution.streaming.runtime.TriggerExecutor.runOneBatch$\
(TriggerExecutor.scala:38)
\tat org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor.runOneBatch\
(TriggerExecutor.scala:71)
\tat org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor.execute\
(TriggerExecutor.scala:83)
\tat org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution.runActivatedStream\
(MicroBatchExecution.scala:716)
\tat org.apache.spark.sql.execution.streaming.runtime.StreamExecution.$anonfun$runStream$1\
(StreamExecution.scala:357)
\tat scala.runtime.java8.JFunction0$mcV$sp.apply(JFunction0$mcV$sp.scala:18)
\tat org.apache.spark.sql.SparkSession.withActive(SparkSession.scala:810)
\tat org.apache.spark.sql.execution.streaming.runtime.StreamExecution.org$apache$spark$sql\
$execution$streaming$runtime$StreamExecution$$runStream(StreamExecution.scala:313)
\t... 1 more
Caused by: java.io.IOException: No space left on device
\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)
\tat java.base/java.io.FileOutputStream.write(FileOutputStream.java:349)
\tat org.apache.hadoop.fs.RawLocalFileSystem$LocalFSFileOutputStream.write(RawLocalFileSystem\
.java:545)
\t... 36 more
"""

DISK_FULL_FAILURE = (
    f"{MESSAGE}\n\nJVM stacktrace:\n"
    f"org.apache.spark.sql.streaming.StreamingQueryException: java.io.IOException: No space left on device\n"
    f"{QUERY_SECTION}\n{FRAMES}"
)

STREAMING = StreamingJobConfig(
    query_name="clickstream-windows",
    bootstrap_servers="127.0.0.1:9092",
    checkpoint_dir="/mnt/checkpoints",
    metrics_port=0,
    dead_letter_topic="dead-letters",
)


def test_a_failed_checkpoint_write_names_the_query_checkpoint_and_the_reason() -> None:
    line = explain_query_failure(DISK_FULL_FAILURE, STREAMING)
    assert line is not None
    assert line.startswith(
        "checkpoint write failed under /mnt/checkpoints/clickstream-windows.dead-letters: "
        "No space left on device ("
    )
    assert "\n" not in line


def test_without_the_stack_trace_nothing_says_the_checkpoint_failed() -> None:
    """Spark's message alone has the reason but not where: a full local dir would read the same."""
    assert "No space left on device" in MESSAGE
    assert checkpoint_write_failure(MESSAGE, STREAMING) is None
    assert explain_query_failure(MESSAGE, STREAMING) is None


def test_the_checkpoint_root_is_named_when_the_query_is_not() -> None:
    nameless = DISK_FULL_FAILURE.replace("Identifier: ", "")
    line = checkpoint_write_failure(nameless, STREAMING)
    assert line is not None and line.startswith("checkpoint write failed under /mnt/checkpoints: No space")


def test_classifiers_are_tried_in_order_and_the_first_line_wins() -> None:
    def lost_input(failure: str, streaming: StreamingJobConfig) -> str | None:
        return "input lost" if "Some data may have been lost" in failure else None

    classifiers = (lost_input, *CLASSIFIERS)
    assert explain_query_failure(DISK_FULL_FAILURE, STREAMING, classifiers) == checkpoint_write_failure(
        DISK_FULL_FAILURE, STREAMING
    )
    assert explain_query_failure("Some data may have been lost", STREAMING, classifiers) == "input lost"
    assert explain_query_failure("something else", STREAMING, classifiers) is None

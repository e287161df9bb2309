"""The offset log is read on the driver: no Spark job, so no executor ever needs the checkpoint volume."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from jobs.common.offset_log import batch_end_offsets, batch_watermark_ms

OFFSETS_V1 = (
    "v1\n"
    '{"batchWatermarkMs":1795000000000,"batchTimestampMs":1795000005000,"conf":{}}\n'
    '{"users":{"0":12,"1":7}}\n'
    "-\n"
    '{"orders":{"0":3}}'
)


def test_offset_log_read_on_the_driver_runs_no_spark_job(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "4").write_text(OFFSETS_V1)
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("offset-log-read", "reading the offset log")
    try:
        offsets = batch_end_offsets(spark, tmp_path.as_uri(), 4)
        watermark = batch_watermark_ms(spark, str(tmp_path), 4)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert offsets == {"users": {"0": 12, "1": 7}, "orders": {"0": 3}}
    assert watermark == 1795000000000
    assert tracker.getJobIdsForGroup("offset-log-read") == []

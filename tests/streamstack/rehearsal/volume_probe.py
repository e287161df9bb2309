"""A driver for the standalone cluster: reads a batch's offset log the old way (a Spark job, on executors)
and the job's way (on the driver), and prints what each gave as JSON. Run as a process of its own, since
the test session already has a local SparkContext."""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

from jobs.common.offset_log import batch_end_offsets


def main(master_url: str, checkpoint: str) -> None:
    spark = (
        SparkSession.builder.master(master_url)
        .appName("volume-probe")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "512m")
        .config("spark.task.maxFailures", "1")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    result: dict[str, object] = {}
    try:
        [row] = spark.read.text(f"{checkpoint}/offsets/0", wholetext=True).collect()
        result["executor_read"] = str(row["value"]).splitlines()[2]
    except Exception as error:
        result["executor_error"] = str(error)[:2000]
    result["driver_read"] = batch_end_offsets(spark, checkpoint, 0)
    spark.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

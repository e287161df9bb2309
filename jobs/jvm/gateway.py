"""How the jobs hand DataFrames to their JVM classes: the class through the driver's py4j gateway, and the
rows in the exact columns and types a Java operator reads by position."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from py4j.java_gateway import JavaClass  # type: ignore[import-untyped]
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F


def jvm_class(spark: SparkSession, name: str) -> Any:
    """The JVM class `name` (py4j), or a clear error when the jobs' jar is not on the driver's classpath
    (py4j would otherwise hand back a package and fail on the first call)."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        raise RuntimeError("the SparkContext has no JVM gateway (stopped, or Spark Connect)")
    found = getattr(jvm, name)
    if not isinstance(found, JavaClass):
        raise RuntimeError(
            f"{name} is not on the Spark driver's classpath: build the jar "
            "(`python -m jobs.jvm.build`) and add it to spark.jars"
        )
    return found


def in_columns(rows: DataFrame, columns: Mapping[str, str], constants: Mapping[str, Any]) -> DataFrame:
    """`rows` in exactly `columns` ({name: SQL type}, in that order): `constants` as literals, the columns
    `rows` lacks as nulls, timestamps as microseconds (Java reads plain longs)."""
    present = set(rows.columns)

    def column(name: str, kind: str) -> Column:
        stored = "long" if kind == "timestamp" else kind
        if name in constants:
            return F.lit(constants[name]).cast(stored)
        if name not in present:
            return F.lit(None).cast(stored)
        return F.unix_micros(F.col(name)) if kind == "timestamp" else F.col(name).cast(stored)

    return rows.select(*[column(name, kind).alias(name) for name, kind in columns.items()])

"""JVM code the jobs call from Spark SQL: `EventDecoder`, every dead-letter check of
`jobs.common.events.decode_events` in one pass (Java, Jackson's streaming parser), which Spark calls as a
Catalyst expression, `DecodeExpression` (registered per session in its function registry); and the tables
that jobs keep as state (`flatMapGroupsWithState`): `ProfileTable`, user-enrichment's users table
(jobs.jvm.profile_table), and `UserViewTables`, user-view's orders and users (jobs.jvm.user_view_tables).
jobs.jvm.gateway hands them their DataFrames. Beside them, what every driver starts and stops with: the
checkpoint filesystem and the `StateStoreDrain` plugin (jobs.common.session), and `GracefulStop`
(jobs.common.stopping).

The jar is built from `src/` against pyspark's own jars (`python -m jobs.jvm.build`, run by `make setup`),
into the local cache for local runs and tests, and into Spark's jars folder in the jobs image. Both places
are named here.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

JAR_NAME = "streamstack-jvm-0.1.0.jar"
# In the jobs image (jobs/Dockerfile): on Spark's own classpath, so no spark.jars entry is needed there.
IMAGE_JAR = PurePosixPath("/opt/spark/jars") / JAR_NAME
SOURCES = Path(__file__).resolve().parent / "src"
EXPRESSION_CLASS = "streamstack.jvm.DecodeExpression"


def local_jar() -> Path:
    """Where `python -m jobs.jvm.build` puts the jar on this machine: the runtimes' cache
    (`STREAMSTACK_CACHE`, default `.cache/streamstack` in the repository)."""
    repo = Path(__file__).resolve().parents[2]
    cache = Path(os.environ.get("STREAMSTACK_CACHE", repo / ".cache" / "streamstack"))
    return cache / "jvm" / JAR_NAME

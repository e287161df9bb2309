"""The levers measured, one variant each, and how the best combination is chosen from their results."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from jobs.common.config import StreamingJobConfig

STATELESS = "stateless"
STATEFUL = "stateful"
SIX = "six"
"""Run kinds: the stateless query alone, the stateful query alone, the window job's six queries together."""

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
ASYNC_PROGRESS = {"asyncProgressTrackingEnabled": "true"}
JOBS_SHUFFLE_PARTITIONS = StreamingJobConfig.shuffle_partitions
JOBS_FETCH_MAX_WAIT_MS = StreamingJobConfig.fetch_max_wait_ms
# The Kafka consumer's default fetch.max.wait.ms, the jobs' wait until 2026-11-25.
KAFKA_DEFAULT_FETCH_MAX_WAIT_MS = 500
FETCH_WAIT_10_MS = 10  # the jobs' wait from 2026-11-25 to 2026-11-28

# A lever counts as helping when it lowers the median triggerExecution by at least this much, relative and
# absolute: smaller differences are within the drift between two runs of the same settings on this machine.
MIN_GAIN_FRACTION = 0.10
MIN_GAIN_MS = 5.0


@dataclass(frozen=True)
class Variant:
    """Settings of one measurement, all but one of them the jobs' own flags: Spark settings of the session
    (`--spark-conf`), the shuffle partitions (`--shuffle-partitions`), the Kafka source's fetch wait
    (`--kafka-fetch-max-wait-ms`); then writer options of the stateless query (the jobs have no flag for
    them), and which runs the variant makes."""

    name: str
    lever: str  # the group it belongs to: at most one variant per lever goes into the combination
    description: str
    spark_conf: dict[str, str] = field(default_factory=dict)
    shuffle_partitions: int = JOBS_SHUFFLE_PARTITIONS
    fetch_max_wait_ms: int = JOBS_FETCH_MAX_WAIT_MS
    stateless_options: dict[str, str] = field(default_factory=dict)
    runs: tuple[str, ...] = (STATELESS, STATEFUL)
    progress_listener: bool = True  # the jobs' progress listener (metrics, shadow-group commits)

    @property
    def settings(self) -> str:
        """What differs from the jobs' current settings, in one line."""
        parts = [f"{key}={value}" for key, value in sorted(self.spark_conf.items())]
        if self.shuffle_partitions != JOBS_SHUFFLE_PARTITIONS:
            parts.append(f"spark.sql.shuffle.partitions={self.shuffle_partitions}")
        if self.fetch_max_wait_ms != JOBS_FETCH_MAX_WAIT_MS:
            parts.append(f"--kafka-fetch-max-wait-ms {self.fetch_max_wait_ms}")
        parts += [f"stateless {key}={value}" for key, value in sorted(self.stateless_options.items())]
        if not self.progress_listener:
            parts.append("no progress listener")
        return ", ".join(parts) or "the jobs' current settings"


BASELINE = Variant(
    "baseline",
    "baseline",
    f"the jobs' current settings: {JOBS_SHUFFLE_PARTITIONS} shuffle partitions, HDFS-backed state store, "
    f"synchronous progress, the Kafka source's fetch wait {JOBS_FETCH_MAX_WAIT_MS} ms, checkpoint files "
    "without checksum files (since 2026-11-26) through the jobs' filesystem without child processes "
    "(jobs/jvm LocalCheckpointFileSystem, since 2026-11-26, stop 30)",
)

SINGLE_LEVERS = (
    Variant(
        "kafka-default-fetch-wait",
        "fetch-wait",
        f"Kafka's default fetch wait ({KAFKA_DEFAULT_FETCH_MAX_WAIT_MS} ms), what the jobs used before "
        "--kafka-fetch-max-wait-ms",
        fetch_max_wait_ms=KAFKA_DEFAULT_FETCH_MAX_WAIT_MS,
    ),
    Variant("shuffle-1", "shuffle", "one shuffle partition", shuffle_partitions=1, runs=(STATEFUL,)),
    Variant(
        "shuffle-2", "shuffle", "shuffle partitions = local cores", shuffle_partitions=2, runs=(STATEFUL,)
    ),
    Variant(
        "rocksdb-changelog",
        "state-store",
        "RocksDB state store with changelog checkpointing",
        spark_conf={
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        },
        runs=(STATEFUL,),
    ),
    Variant(
        "async-progress",
        "async-progress",
        "offset and commit logs written asynchronously (a writer option, refused by a stateful query)",
        stateless_options=ASYNC_PROGRESS,
        runs=(STATELESS,),
    ),
    Variant(
        "no-data-batches-off",
        "no-data-batches",
        "no extra batch when only the watermark moved",
        spark_conf={"spark.sql.streaming.noDataMicroBatches.enabled": "false"},
        runs=(STATEFUL,),
    ),
    Variant(
        "aqe-off",
        "aqe",
        "adaptive query execution off",
        spark_conf={"spark.sql.adaptive.enabled": "false"},
        runs=(STATEFUL,),
    ),
    Variant(
        "maintenance-5s",
        "maintenance",
        "state store maintenance every 5 s instead of 60 s (so that it runs during the measurement)",
        spark_conf={"spark.sql.streaming.stateStore.maintenanceInterval": "5s"},
        runs=(STATEFUL,),
    ),
)

EXTRA_LEVERS: tuple[Variant, ...] = (
    Variant(
        "retention",
        "retention",
        "fewer batches kept (100 -> 20) and snapshots after 5 deltas (10)",
        spark_conf={
            "spark.sql.streaming.minBatchesToRetain": "20",
            "spark.sql.streaming.stateStore.minDeltasForSnapshot": "5",
        },
        runs=(STATEFUL,),
    ),
)

RAW_LOCAL_FS = {
    # Checkpoint files without Hadoop's .crc sidecars: FileSystem and, for the checkpoint file manager
    # (FileContext), the AbstractFileSystem; both still write a temporary file and rename it into place.
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
}

# Hadoop's defaults for file:// paths: every file with a `.<name>.crc` checksum file beside it.
CHECKSUM_LOCAL_FS = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.LocalFs",
}

# Levers of the second round (issue 16's list after the fetch wait): run them with --only.
SECOND_ROUND = (
    Variant(
        "fetch-wait-10",
        "fetch-wait",
        f"the Kafka source's fetch wait {FETCH_WAIT_10_MS} ms, the jobs' from 2026-11-25 to 2026-11-28: each "
        "task waits it once, when Spark's reader asks for the partition's offsets behind the consumer's "
        "fetch ahead",
        fetch_max_wait_ms=FETCH_WAIT_10_MS,
    ),
    Variant(
        "checksum-fs",
        "checkpoint-fs",
        "checkpoint files with checksum (.crc) files, Hadoop's default: the jobs' settings before 2026-11-26",
        spark_conf=CHECKSUM_LOCAL_FS,
    ),
    Variant(
        "raw-local-fs",
        "checkpoint-fs",
        "checkpoint files without checksum (.crc) files through Hadoop's RawLocalFileSystem and RawLocalFs, "
        "which fork chmod and readlink per file (the jobs' settings from 2026-11-26 until the jobs' own "
        "filesystem without child processes)",
        spark_conf=RAW_LOCAL_FS,
    ),
    Variant(
        "listeners-light",
        "listeners",
        "no streaming UI listener and 50 SQL executions kept (1000): less listener work per batch",
        spark_conf={
            "spark.sql.streaming.ui.enabled": "false",
            "spark.sql.ui.retainedExecutions": "50",
        },
    ),
    Variant(
        "ui-on",
        "ui",
        "the Spark UI on, as the cluster has it (Spark's default; `streamstack local up` turns it off), "
        "with its streaming tab: what the UI's listeners cost per batch",
        spark_conf={"spark.ui.enabled": "true", "spark.ui.port": "0"},
    ),
    Variant(
        "no-progress-listener",
        "progress-listener",
        "without the jobs' progress listener (its metrics and shadow-group commits): what the listener costs",
        progress_listener=False,
    ),
    Variant(
        "locality-wait-0",
        "locality",
        "tasks never wait for their preferred location (state store tasks wait up to 3 s by default)",
        spark_conf={"spark.locality.wait": "0s"},
        runs=(STATEFUL,),
    ),
    Variant(
        "kryo",
        "serializer",
        "Kryo instead of Java serialization",
        spark_conf={"spark.serializer": "org.apache.spark.serializer.KryoSerializer"},
    ),
    Variant(
        "codegen-off",
        "codegen",
        "no whole-stage code generation (nothing to compile or look up when a batch is planned)",
        spark_conf={"spark.sql.codegen.wholeStage": "false"},
    ),
    Variant(
        "polling-delay-1ms",
        "polling",
        "the idle loop's polling delay 1 ms (10 ms)",
        spark_conf={"spark.sql.streaming.pollingDelay": "1ms"},
        runs=(STATELESS,),
    ),
    Variant(
        "log-level-warn",
        "logging",
        "Spark's log level WARN (`spark.log.level`, propagated to executors): INFO events (a Kafka "
        "consumer's seeks and offset resets, task starts and ends, checkpoint renames) are dropped at the "
        "logger instead of being built and then filtered (measured 2026-11-26: no difference, not adopted)",
        spark_conf={"spark.log.level": "WARN", "spark.executor.syncLogLevel.enabled": "true"},
    ),
    Variant(
        "state-combined",
        "state-combined",
        "the state levers measured as noise alone, combined: one shuffle partition, RocksDB with changelog "
        "checkpointing, snapshots after 5 deltas, no locality wait",
        spark_conf={
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
            "spark.sql.streaming.stateStore.minDeltasForSnapshot": "5",
            "spark.locality.wait": "0s",
        },
        shuffle_partitions=1,
        runs=(STATEFUL,),
    ),
)

EXTRA_LEVERS = (*EXTRA_LEVERS, *SECOND_ROUND)

SIX_QUERIES = Variant(
    "six-queries", "six", "the window job's six queries in one driver (its own start_queries)", runs=(SIX,)
)


def _gain(baseline: float | None, measured: float | None) -> float:
    """How much lower `measured` is than `baseline` (ms), when it is lower by enough to count, else 0."""
    if baseline is None or measured is None:
        return 0.0
    gain = baseline - measured
    return gain if gain >= max(MIN_GAIN_MS, MIN_GAIN_FRACTION * baseline) else 0.0


def best_combination(
    levers: Sequence[Variant],
    medians: Mapping[str, tuple[float | None, float | None]],
    name: str = "best",
) -> tuple[Variant, list[str]]:
    """The baseline plus, per lever group, the variant that lowered the median triggerExecution most (the
    stateless or the stateful query's), if any helped.

    `medians` maps a variant's name to its (stateless, stateful) median triggerExecution (ms, None when not
    measured or refused); it must hold "baseline". Returns the combination and the variants it took."""
    base_stateless, base_stateful = medians[BASELINE.name]
    chosen: dict[str, tuple[float, Variant]] = {}
    for variant in levers:
        stateless, stateful = medians.get(variant.name, (None, None))
        gain = max(_gain(base_stateless, stateless), _gain(base_stateful, stateful))
        if gain > 0 and gain > chosen.get(variant.lever, (0.0, variant))[0]:
            chosen[variant.lever] = (gain, variant)
    adopted = sorted((variant for _gain_ms, variant in chosen.values()), key=lambda variant: variant.name)
    taken = [variant.name for variant in adopted]
    combination = Variant(name, "combination", "every lever that helped: " + (", ".join(taken) or "none"))
    for variant in adopted:
        combination = _adopt(combination, variant)
    return combination, taken


def _adopt(combination: Variant, lever: Variant) -> Variant:
    """`combination` with whatever `lever` changes from the baseline."""

    def changed(setting: str) -> int:
        value: int = getattr(lever, setting)
        return value if value != getattr(BASELINE, setting) else getattr(combination, setting)

    return replace(
        combination,
        spark_conf={**combination.spark_conf, **lever.spark_conf},
        shuffle_partitions=changed("shuffle_partitions"),
        fetch_max_wait_ms=changed("fetch_max_wait_ms"),
        stateless_options={**combination.stateless_options, **lever.stateless_options},
    )

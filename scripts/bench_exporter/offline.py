"""The exporter's collection without Kafka: the benchmark's layout built in memory, several collections timed.

Per collection: building the snapshot (statuses, rates, lag seconds, groups), rendering the lag text and
compressing it (`LagExposition.prepare`; rendering alone is timed once at the end), wall and CPU time (the
process's: on a shared machine the steadier of the two), with RSS and peak RSS after each; with
`--tracemalloc`, Python's peak allocation over the run (slower). `--package` measures another copy of the
exporter (a module path whose `snapshot`, `status` and `collector` modules have the same API), e.g. the code
before a change:

    .venv/bin/python -m scripts.bench_exporter.offline --sizes 10000x100,50000x500 --collections 4
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from scripts.bench_exporter.load import PARTITIONS_PER_TOPIC, Size, committed_offset, records_in, topic_name


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def layout(size: Size, step: int) -> tuple[list[Any], dict[Any, int], dict[Any, int], dict[Any, int]]:
    """(position fields, latest, earliest, record timestamps) of collection `step`: the benchmark's topics,
    groups and committed offsets; every 3rd collection the lagging consumers commit one more record."""
    latest, earliest, stamps = {}, {}, {}
    for index in range(size.partitions // PARTITIONS_PER_TOPIC):
        topic = topic_name(index)
        for partition in range(PARTITIONS_PER_TOPIC):
            end = records_in(index, partition)
            latest[(topic, partition)] = end
            earliest[(topic, partition)] = 0
    positions = []
    for group_index, (group, topics) in enumerate(size.assignment().items()):
        for index in topics:
            topic = topic_name(index)
            for partition in range(PARTITIONS_PER_TOPIC):
                end = latest[(topic, partition)]
                committed = committed_offset(group_index, index, partition, end)
                if committed < end:
                    committed = min(end - 1, committed + step // 3)
                    stamps[(topic, partition, committed)] = 1_700_000_000_000 + committed * 1_000
                positions.append(("group", group, topic, partition, committed, 1_700_000_000.0 + step))
    return positions, latest, earliest, stamps


def run(package: str, size: Size, collections: int, trace: bool) -> dict[str, Any]:
    snapshot_module = importlib.import_module(f"{package}.snapshot")
    status_module = importlib.import_module(f"{package}.status")
    collector_module = importlib.import_module(f"{package}.collector")
    sources_module = importlib.import_module(f"{package}.sources")
    history = status_module.History(300.0)
    produced = snapshot_module.ProducedHistory()
    exposition = collector_module.LagExposition()
    rounds = []
    if trace:
        tracemalloc.start()
    for step in range(collections):
        fields, latest, earliest, stamps = layout(size, step)
        positions = [sources_module.Position(*row) for row in fields]
        del fields
        now = 1_700_000_300.0 + 10.0 * step
        for tp, offset in latest.items():
            produced.record(tp, offset, now)
        started, started_cpu = time.perf_counter(), time.process_time()
        snapshot = snapshot_module.build_snapshot(
            snapshot_module.Inputs(positions, earliest, latest, stamps), now, history, produced
        )
        built, built_cpu = time.perf_counter(), time.process_time()
        rendered = exposition.prepare(snapshot)
        prepared, prepared_cpu = time.perf_counter(), time.process_time()
        rounds.append(
            {
                "snapshot_s": round(built - started, 3),
                "snapshot_cpu_s": round(built_cpu - started_cpu, 3),
                "render_and_compress_s": round(prepared - built, 3),
                "render_and_compress_cpu_s": round(prepared_cpu - built_cpu, 3),
                "text_mb": round(rendered.text_bytes / 1e6, 1),
                "gzip_mb": round(len(rendered.gzip_prefix) / 1e6, 2),
                "rss_mb": round(_status_kb("VmRSS") / 1024),
                "peak_rss_mb": round(_status_kb("VmHWM") / 1024),
            }
        )
        print(package, size, rounds[-1], file=sys.stderr, flush=True)
        last = snapshot  # the rendering refers to its snapshot weakly
        del positions, latest, earliest, stamps, snapshot, rendered
        gc.collect()
    result: dict[str, Any] = {"package": package, "partitions": size.partitions, "groups": size.groups}
    result["series"] = size.series()
    if trace:
        result["tracemalloc_peak_mb"] = round(tracemalloc.get_traced_memory()[1] / 1e6)
        tracemalloc.stop()
    started = time.perf_counter()
    text = sum(len(chunk) for chunk in collector_module.render_lag_text(last))
    result["render_only_s"] = round(time.perf_counter() - started, 3)
    result["text_chars"] = text
    result["rounds"] = rounds
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000x100", help="partitions x groups, comma separated")
    parser.add_argument("--collections", type=int, default=4)
    parser.add_argument("--package", default="monitoring.lag_exporter")
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    sizes = [Size(*map(int, text.split("x"))) for text in args.sizes.split(",")]
    results = [run(args.package, size, args.collections, args.tracemalloc) for size in sizes]
    payload = {"machine": "shared machine (2 cores, other helpers' tests running)", "results": results}
    text = json.dumps(payload, indent=1)
    if args.output:
        args.output.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

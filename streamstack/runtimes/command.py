"""`python -m streamstack.runtimes [--check]`: fetch whatever is missing, or only report."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from streamstack.errors import StreamstackError
from streamstack.paths import cache_dir
from streamstack.runtimes.cdc import ensure_cdc, locate_cdc
from streamstack.runtimes.fetch import ensure
from streamstack.runtimes.locate import locate
from streamstack.runtimes.tools import ensure_checkov, ensure_go_tools, locate_checkov, locate_go_tools


def _go_tools_only(check: bool) -> int:
    try:
        go_tools = locate_go_tools() if check else ensure_go_tools()
    except StreamstackError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for name, path in go_tools.items():
        print(f"{name:<12} {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streamstack.runtimes",
        description=(
            "Fetch the pinned Kafka, Spark-Kafka, Prometheus, Alertmanager, PostgreSQL, Debezium, helm, "
            "actionlint and checkov."
        ),
    )
    parser.add_argument("--check", action="store_true", help="only check the cache; download nothing")
    parser.add_argument(
        "--kubernetes-tools",
        action="store_true",
        help="also helm, actionlint and checkov (the chart, workflow and manifest checks need them)",
    )
    parser.add_argument(
        "--go-tools",
        action="store_true",
        help=(
            "only helm and actionlint; runs on the standard library alone, so `make` builds them while pip "
            "fills the virtualenv"
        ),
    )
    args = parser.parse_args(argv)
    if args.go_tools:
        return _go_tools_only(args.check)
    go_tools: dict[str, Path] = {}
    checkov: Path | None = None
    try:
        if args.check:
            runtimes, cdc = locate(), locate_cdc()
            if args.kubernetes_tools:
                go_tools, checkov = locate_go_tools(), locate_checkov()
        else:
            # Three lanes: `go install` of helm is two minutes of compiling, checkov's install is mostly
            # network, the downloads are network; one after another they took 3.3 minutes of a clean CI run.
            # The downloads share a lane: apt-get fetches one package at a time.
            with ThreadPoolExecutor(max_workers=3, thread_name_prefix="setup") as lanes:
                downloads = lanes.submit(lambda: (ensure(), ensure_cdc()))
                building = lanes.submit(ensure_go_tools) if args.kubernetes_tools else None
                installing = lanes.submit(ensure_checkov) if args.kubernetes_tools else None
                runtimes, cdc = downloads.result()
                if building is not None and installing is not None:
                    go_tools, checkov = building.result(), installing.result()
    except StreamstackError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"java         {runtimes.java}")
    reporter_jars = len(runtimes.metrics_reporter_jars)
    print(f"kafka        {len(runtimes.kafka_classpath)} jars, metrics reporter {reporter_jars} jars")
    print(f"spark-kafka  {len(runtimes.spark_kafka_jars)} jars")
    print(f"prometheus   {runtimes.prometheus}")
    print(f"promtool     {runtimes.promtool}")
    print(f"alertmanager {runtimes.alertmanager}")
    print(f"amtool       {runtimes.amtool}")
    print(f"postgresql   {cdc.postgresql_bin}")
    print(f"debezium     {len(cdc.debezium_jars)} jars")
    for name, path in go_tools.items():
        print(f"{name:<12} {path}")
    if checkov is not None:
        print(f"checkov      {checkov}")
    print(f"cache        {cache_dir()}")
    return 0

"""Where a driver JVM's time goes, from a JDK Flight Recording (`bench-batch-cost --jfr DIR`): CPU or waiting.

`jfr print --json` gives the recording's events. A `jdk.ExecutionSample` is one sample of one thread found
running Java code (every 10 ms per thread with the `profile` settings), so samples x 10 ms is that thread's
CPU time in Java; `jdk.ThreadPark`, `jdk.JavaMonitorWait`, `jdk.SocketRead` and `jdk.ThreadSleep` (over 10 ms
each with `profile`) are time the thread spent waiting. Per thread group (a thread's name without its
numbers), the samples' CPU seconds and the waits' seconds, and the top frames by samples (the innermost
frame, and the innermost frame in org.apache.spark); divided by --batches, per batch.

    .venv/bin/python -m scripts.bench_batch_cost.jfr RECORDING.jfr --batches 17 [--jfr-tool PATH]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SAMPLE = "jdk.ExecutionSample"
WAITS = ("jdk.ThreadPark", "jdk.JavaMonitorWait", "jdk.SocketRead", "jdk.ThreadSleep")
SAMPLE_PERIOD_S = 0.010  # jdk.ExecutionSample's period in the `profile` settings (JDK 17)
_NUMBERS = re.compile(r"\d+")


def thread_group(name: str) -> str:
    """A thread's name with its numbers and query ids left out: `Executor task launch worker for task 3.0
    in stage 7.0 (TID 12)` -> `Executor task launch worker for task #.# in stage #.# (TID #)`."""
    name = re.sub(r"\[id = [^\]]*\]", "[id = #]", name)
    return _NUMBERS.sub("#", name)


def frame_name(frame: Mapping[str, Any]) -> str:
    method = frame.get("method") or {}
    owner = str((method.get("type") or {}).get("name", "?")).replace("/", ".")  # jfr prints a/b/C
    return f"{owner}.{method.get('name', '?')}"


def _seconds(duration: Any) -> float:
    """jfr's JSON durations: ISO-8601 like `PT0.012345S`, or nanoseconds."""
    if isinstance(duration, int | float):
        return float(duration) / 1e9
    match = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?", str(duration))
    if match is None:
        return 0.0
    hours, minutes, seconds = (float(part) if part else 0.0 for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds


@dataclass
class ThreadGroupTime:
    samples: int = 0
    waits_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    top: Counter[str] = field(default_factory=Counter)
    top_spark: Counter[str] = field(default_factory=Counter)

    @property
    def cpu_s(self) -> float:
        return self.samples * SAMPLE_PERIOD_S


def aggregate(events: Iterable[Mapping[str, Any]]) -> dict[str, ThreadGroupTime]:
    groups: dict[str, ThreadGroupTime] = defaultdict(ThreadGroupTime)
    for event in events:
        kind = event.get("type")
        values = event.get("values") or {}
        thread = values.get("sampledThread") or values.get("eventThread") or {}
        group = groups[thread_group(str(thread.get("javaName") or thread.get("osName") or "?"))]
        frames = (values.get("stackTrace") or {}).get("frames") or []
        if kind == SAMPLE:
            group.samples += 1
            if frames:
                group.top[frame_name(frames[0])] += 1
                spark = next(
                    (
                        f
                        for f in frames
                        if frame_name(f).startswith("org.apache.spark") and "$$Lambda" not in frame_name(f)
                    ),
                    None,
                )
                if spark is not None:
                    group.top_spark[frame_name(spark)] += 1
        elif kind in WAITS:
            group.waits_s[str(kind)] += _seconds(values.get("duration"))
    return groups


def read_events(recording: Path, jfr_tool: str) -> list[dict[str, Any]]:
    printed = subprocess.run(
        [jfr_tool, "print", "--json", "--events", ",".join((SAMPLE, *WAITS)), str(recording)],
        check=True,
        capture_output=True,
        text=True,
    )
    events: list[dict[str, Any]] = json.loads(printed.stdout)["recording"]["events"]
    return events


def report(groups: Mapping[str, ThreadGroupTime], batches: int, top: int = 8) -> str:
    """The thread groups that ran Java code most, by CPU (idle pool threads park for the whole run: their
    waits say nothing), with their waits and top Spark frames."""
    ranked = sorted(groups.items(), key=lambda item: -item[1].cpu_s)
    lines = [f"per batch ({batches} batches): Java CPU ms and waits ms per thread group"]
    for name, group in ranked[:12]:
        waits = ", ".join(f"{kind[4:]} {1000 * s / batches:.0f}" for kind, s in sorted(group.waits_s.items()))
        lines.append(f"  {name[:90]}: CPU {1000 * group.cpu_s / batches:.0f}; waits {waits or '-'}")
        for frame, count in group.top_spark.most_common(top):
            lines.append(f"      {1000 * count * SAMPLE_PERIOD_S / batches:6.1f} ms  {frame}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench-batch-cost-jfr", description=__doc__.splitlines()[0])
    parser.add_argument("recording", type=Path)
    parser.add_argument("--batches", type=int, required=True, help="batches the recording covers")
    parser.add_argument("--jfr-tool", default="jfr", help="the JDK's jfr command")
    args = parser.parse_args(argv)
    print(report(aggregate(read_events(args.recording, args.jfr_tool)), args.batches))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

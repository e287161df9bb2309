"""Enough local brokers for the benchmark's partitions, as a cluster of that size would have.

A broker keeps every partition's active segment open (one file descriptor) and memory-maps its offset and time
indexes (two maps). A process here may hold 20,000 descriptors (`ulimit -n`, a hard limit that even root
cannot raise in this sandbox) and vm.max_map_count is the kernel's default 65,530: one broker failed at
~19,500 partitions with "Too many open files" while applying the topics' metadata, after which the load
producer timed out on metadata (the failure seen at 30,000 partitions). A cluster of 50,000 partitions has
several brokers anyway (Kafka's guidance is thousands of partitions per broker, not tens of thousands), so the
benchmark starts as many as the limits require: node 1 is broker and KRaft controller (`LocalKafka` as it
is), nodes 2.. are brokers of the same cluster. Topics of replication factor 1 spread over them.
"""

from __future__ import annotations

import math
import resource
import subprocess
from pathlib import Path

from streamstack.local.kafka import LocalKafka
from streamstack.runtimes import Runtimes

DESCRIPTORS_SPARE = 2_000  # sockets, jars, logs, internal topics' partitions: a broker used ~170 beyond
MAPS_PER_PARTITION = 2  # offset index and time index of the active segment
MAPS_SPARE = 4_000  # the JVM's own maps (code, threads, jars): ~450 at 19,000 partitions
MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")


def partitions_per_broker(open_files: int, max_map_count: int) -> int:
    """How many partitions one broker may hold under these limits."""
    return min(open_files - DESCRIPTORS_SPARE, (max_map_count - MAPS_SPARE) // MAPS_PER_PARTITION)


def brokers_for(partitions: int, open_files: int, max_map_count: int) -> int:
    """Brokers needed for `partitions` (placement is balanced to within a few percent: 5% headroom)."""
    return max(1, math.ceil(1.05 * partitions / partitions_per_broker(open_files, max_map_count)))


def os_limits() -> dict[str, int]:
    """The limits a broker started from here inherits."""
    maps = int(MAX_MAP_COUNT.read_text()) if MAX_MAP_COUNT.exists() else 65_530
    return {"open_files": resource.getrlimit(resource.RLIMIT_NOFILE)[0], "max_map_count": maps}


class ExtraBroker(LocalKafka):
    """A broker-only node of the cluster whose controller is `controller` (a started LocalKafka)."""

    def __init__(self, runtimes: Runtimes, workdir: Path, controller: LocalKafka, node_id: int, heap: str):
        super().__init__(runtimes, workdir, heap=heap, java_options=())
        self.controller = controller
        self.node_id = node_id

    def _write_config(self) -> Path:
        path = super()._write_config()
        properties = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        properties.update(
            {
                "process.roles": "broker",
                "node.id": str(self.node_id),
                "controller.quorum.bootstrap.servers": f"{self.controller.bootstrap_servers.split(':')[0]}:"
                f"{self.controller.controller_port}",
                "listeners": f"PLAINTEXT://{self.bootstrap_servers}",
            }
        )
        path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
        return path

    def start(self, timeout: float = 90.0) -> ExtraBroker:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config_path = self._write_config()
        formatted = subprocess.run(
            self._java(
                "kafka.tools.StorageTool", "format", "-t", cluster_id(self.controller), "-c", str(config_path)
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if formatted.returncode != 0:
            raise RuntimeError(f"formatting broker {self.node_id} failed: {formatted.stderr.strip()[-500:]}")
        self._launch(self._java("kafka.Kafka", str(config_path)))
        self._wait_until_ready(timeout)
        return self


def cluster_id(kafka: LocalKafka) -> str:
    properties = (kafka.workdir / "data" / "meta.properties").read_text().splitlines()
    return next(line.split("=", 1)[1] for line in properties if line.startswith("cluster.id="))


def start_cluster(runtimes: Runtimes, workdir: Path, brokers: int, heap: str) -> list[LocalKafka]:
    """Node 1 (broker and controller), then brokers 2..`brokers`; stops what started if one fails."""
    nodes: list[LocalKafka] = [LocalKafka(runtimes, workdir / "kafka-1", heap=heap, java_options=()).start()]
    try:
        for node_id in range(2, brokers + 1):
            nodes.append(ExtraBroker(runtimes, workdir / f"kafka-{node_id}", nodes[0], node_id, heap).start())
    except BaseException:
        stop_cluster(nodes)
        raise
    return nodes


def stop_cluster(nodes: list[LocalKafka]) -> None:
    for node in reversed(nodes):
        node.stop()

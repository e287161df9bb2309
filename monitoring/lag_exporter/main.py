"""The HTTP entry point: parse the config, start the refresh loop, serve /metrics until SIGTERM or SIGINT.

    python -m monitoring.lag_exporter --bootstrap-servers kafka:9092 --listen 0.0.0.0:9308 \\
        --refresh-interval 10 --window 300 --checkpoint-dir clickstream=/checkpoints/clickstream

Exit codes: 0 after a clean stop, 2 for a bad configuration or a listen address in use.
"""

from __future__ import annotations

import gc
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from prometheus_client import CollectorRegistry

from contracts.errors import ConfigError
from monitoring.lag_exporter.collector import ExporterHealth, LagExposition, metrics_app, start_metrics_server
from monitoring.lag_exporter.config import parse_args
from monitoring.lag_exporter.kafka_reader import KafkaReader
from monitoring.lag_exporter.loop import Refresher, map_large_allocations
from monitoring.lag_exporter.postgres_source import SourceCollector, SourceLoop

log = logging.getLogger("monitoring.lag_exporter")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_args(argv)
    except ConfigError as error:
        print(f"lag exporter: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if config.log_level.upper() != "DEBUG":  # kafka-python logs every reconnect while a broker is down
        logging.getLogger("kafka").setLevel(logging.CRITICAL)

    # A scrape waits for the GIL at each of its socket calls while the loop thread computes; the default
    # 5 ms switch interval would add tens of milliseconds to a scrape during a collection.
    sys.setswitchinterval(0.001)
    # A collection at 10,000 partitions allocates a million short-lived objects: with the default
    # threshold (700) the cyclic collector ran ~1,000 times per collection, seven of them full passes of
    # 60-150 ms that stall every thread (a scrape too) and found nothing. The objects alive now (modules,
    # classes) stay for good: frozen, no pass looks at them again.
    gc.set_threshold(100_000, 10, 10)
    map_large_allocations()
    gc.freeze()
    registry = CollectorRegistry()
    health = ExporterHealth(registry)
    exposition = LagExposition()
    refresher = Refresher(config, KafkaReader(config), health, on_publish=exposition.prepare)
    source = None if config.source is None else SourceLoop(config.source, config.refresh_interval)
    if source is not None:
        registry.register(SourceCollector(source.latest))
    try:
        server, server_thread = start_metrics_server(
            config.listen_host, config.listen_port, metrics_app(registry, exposition, refresher.latest)
        )
    except OSError as error:
        print(f"lag exporter: --listen {config.listen_host}:{config.listen_port}: {error}", file=sys.stderr)
        return 2
    host, port = server.server_address[:2]
    log.info("serving http://%s:%s/metrics", host, port)

    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("received signal %d, stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    loop = threading.Thread(target=refresher.run, args=(stop,), name="lag-refresh", daemon=True)
    loop.start()
    source_thread = None
    if source is not None:
        source_thread = threading.Thread(target=source.run, args=(stop,), name="source-refresh", daemon=True)
        source_thread.start()
    while not stop.wait(1.0):
        pass
    server.shutdown()
    server.server_close()
    server_thread.join(timeout=5)
    loop.join(timeout=config.kafka_timeout * 3 + config.refresh_interval)
    if source_thread is not None:
        source_thread.join(timeout=10)
    log.info("stopped")
    return 0

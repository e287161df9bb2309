"""Test-side Kafka and metrics helpers: produce known events, read topics back, poll a job's metrics."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families


def produce(bootstrap_servers: str, topic: str, records: Iterable[tuple[bytes | None, bytes]]) -> int:
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all")
    sent = 0
    try:
        for key, value in records:
            producer.send(topic, key=key, value=value)
            sent += 1
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    return sent


def read_all(bootstrap_servers: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of the topic, from the beginning up to the end offsets as of now."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        end_offsets = consumer.end_offsets(partitions)
        records: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < end_offsets[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end offsets {end_offsets}")
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend((record.key, record.value) for record in batch)
        return records
    finally:
        consumer.close()


def scrape(metrics_url: str) -> dict[str, float]:
    """Samples of an endpoint as {'name{label="v",...}': value}, plus a sum per metric name."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{key}="{value}"' for key, value in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
            samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
    return samples


def wait_for(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def metric_sum(samples: dict[str, float], name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include all of `labels` (from `scrape`)."""
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    total = 0.0
    for key, value in samples.items():
        metric, _, label_text = key.partition("{")
        if (
            metric == name
            and label_text
            and all(item in label_text.rstrip("}").split(",") for item in wanted)
        ):
            total += value
    return total

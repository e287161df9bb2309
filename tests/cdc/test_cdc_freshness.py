"""End-to-end freshness and undecodable rows on the real path: PostgreSQL -> Debezium on Kafka Connect ->
Kafka -> the user-view job as deployed (its own driver process, metrics on its own port).

A burst of SQL transactions, each timed on the test's clock before it starts and after it commits: the
source commit times the driver reports (Debezium's `source.ts_ms`, carried in a header) lie inside those
bounds, the freshness it serves is positive and small, and it stops moving once the database is idle. A
users row the job cannot decode (a year PostgreSQL takes and the job's timestamp format does not) goes to
dead letters with its reason, and the view keeps the row as it was."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from contracts.metrics import (
    FRESHNESS_SECONDS,
    QUERY_PREFIX,
    SOURCE_COMMIT_APPLIED,
    SOURCE_COMMIT_NEWEST,
    SOURCE_COMMIT_OLDEST,
)
from contracts.pipeline import load_pipeline
from streamstack.local.jobs import spark_job_process
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.ports import free_port
from streamstack.local.prometheus import LocalPrometheus
from streamstack.rehearsal.panels import ALL_VALUES, dashboards, grafana_substitute
from streamstack.runtimes import Runtimes
from tests.cdc.conftest import Capture
from tests.kafka_helpers import latest_per_key, read_dead_letters, read_records, scrape, wait_for
from tests.monitoring.test_queries_live import FRESHNESS_ONLY, underlying
from tests.monitoring.test_rules import RULES_DIR, load_rules

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

QUERY = "user-view"
USERS = 40


def _sample(samples: dict[str, float], family: str, query: str = QUERY) -> float | None:
    return samples.get(f'{QUERY_PREFIX}{family}{{query="{query}"}}')


def _freshness_queries() -> dict[str, list[str]]:
    """The freshness alert's operand and the freshness panel's queries (with "All" and with user-view
    chosen), by their key in tests/monitoring/test_queries_live.py's FRESHNESS_ONLY."""
    queries: dict[str, list[str]] = {}
    for rule in load_rules():
        if f"alert {rule.name}" in FRESHNESS_ONLY:
            queries[f"alert {rule.name}"] = list(underlying(rule.expr))
    for uid, dashboard in dashboards().items():
        for panel in dashboard["panels"]:
            if f"panel {uid}/{panel.get('title')}" in FRESHNESS_ONLY:
                queries[f"panel {uid}/{panel['title']}"] = [
                    grafana_substitute(target["expr"], values)
                    for target in panel["targets"]
                    for values in (ALL_VALUES, {"namespace": ".*", "job": QUERY, "topic": ".*"})
                ]
    assert set(queries) == set(FRESHNESS_ONLY)
    return queries


def test_freshness_from_commit_to_view_and_an_undecodable_row_to_dead_letters(
    runtimes: Runtimes, kafka: LocalKafka, capture: Capture, topic_name: str, tmp_path: Path
) -> None:
    output_topic, dead_letter_topic = f"{topic_name}-user-view", f"{topic_name}-dead-letters"
    kafka.create_topics([TopicSpec(output_topic, partitions=2, compact=True), TopicSpec(dead_letter_topic)])
    capture.start_connector()
    port = free_port()
    job = spark_job_process(
        runtimes,
        "jobs.user_view",
        name=QUERY,
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint_dir=tmp_path / "checkpoints",
        metrics_port=port,
        log_path=tmp_path / "user-view.log",
        scratch_dir=tmp_path / "scratch",
        trigger_interval="1 second",
        extra_args=(
            *load_pipeline().job(QUERY).setting_arguments,
            *("--users-topic", capture.topics["users"], "--orders-topic", capture.topics["orders"]),
            *("--output-topic", output_topic, "--dead-letter-topic", dead_letter_topic),
        ),
    ).start()
    metrics_url = f"http://127.0.0.1:{port}/metrics"
    prometheus = LocalPrometheus(
        runtimes,
        tmp_path / "prometheus",
        {"streaming-jobs": [f"127.0.0.1:{port}"]},
        scrape_interval="1s",
        rule_files=(RULES_DIR / "streamstack-freshness.yaml",),
    )
    try:
        job.wait_until_http_ready(QUERY, metrics_url, timeout=120)
        prometheus.start()
        # The burst: one transaction per statement, each bounded on this clock by when it started and
        # when its commit returned (PostgreSQL runs on this machine, so it shares the clock).
        bounds: list[tuple[float, float]] = []
        with capture.connection() as connection:
            connection.autocommit = True
            for n in range(USERS):
                started = time.time()
                connection.execute(
                    "INSERT INTO public.users VALUES (%s, %s, 'NL', 'basic', now())", (f"u{n}", f"user {n}")
                )
                connection.execute(
                    "INSERT INTO public.orders VALUES (%s, %s, 12.50, 'placed', now())", (f"o{n}", f"u{n}")
                )
                bounds.append((started, time.time()))
        first_started, last_committed = bounds[0][0], bounds[-1][1]

        def view() -> dict[str, object]:
            return latest_per_key(read_records(kafka.bootstrap_servers, output_topic))

        wait_for(lambda: len(view()) == USERS, 240, "the view to hold every user", interval=1.0)
        wait_for(
            lambda: (_sample(scrape(metrics_url), SOURCE_COMMIT_NEWEST) or 0) >= bounds[-1][0] - 0.002,
            30,
            "the driver to report the burst's last commit",
        )
        samples, scraped = scrape(metrics_url), time.time()
        oldest = _sample(samples, SOURCE_COMMIT_OLDEST)
        newest = _sample(samples, SOURCE_COMMIT_NEWEST)
        applied = _sample(samples, SOURCE_COMMIT_APPLIED)
        freshness = _sample(samples, FRESHNESS_SECONDS)
        assert oldest is not None and newest is not None and applied is not None and freshness is not None
        # Commit times are PostgreSQL's, in milliseconds: inside the burst (1 ms of rounding either side),
        # the newest one the last transaction's; the batch that applied them ended after them.
        assert first_started - 0.002 <= oldest <= newest <= last_committed + 0.002
        assert bounds[-1][0] - 0.002 <= newest
        assert newest < applied <= time.time()
        # Positive; at least the last batch's commit-to-view delay, at most the age of its oldest change
        # when scraped (and on any machine well under the alert's SLO).
        timing = f"burst {first_started:.3f}..{last_committed:.3f} commits {oldest:.3f}..{newest:.3f}"
        timing += f" applied {applied:.3f} scraped {scraped:.3f} freshness {freshness:.3f}"
        print(timing)
        assert 0 < applied - oldest <= freshness <= scraped - oldest + 0.001, timing
        assert freshness < 300, timing

        # Idle database: once Spark finds no new input (its idle event, every 10 s by default) the
        # freshness is the last batch's commit-to-view delay and stops growing.
        def settled() -> bool:
            before = _sample(scrape(metrics_url), FRESHNESS_SECONDS)
            time.sleep(1.5)
            return before == _sample(scrape(metrics_url), FRESHNESS_SECONDS)

        wait_for(settled, 40, "the freshness to stop growing while the database is idle", interval=0.5)
        idle = _sample(scrape(metrics_url), FRESHNESS_SECONDS)
        assert idle is not None and 0 < idle <= applied - oldest + 0.001

        # The alert's operand and the panel's queries return the driver's series from a live Prometheus.
        def empty() -> dict[str, list[str]]:
            return {
                key: missing
                for key, queries in _freshness_queries().items()
                if (missing := [query for query in queries if not prometheus.query(query)])
            }

        wait_for(lambda: empty() == {}, 30, "Prometheus to answer the freshness queries")

        # A users row the job cannot decode: a year PostgreSQL accepts and the job's ISO-8601 timestamps
        # (four-digit years) do not. It goes to dead letters with its reason; the view keeps the row.
        before = view()["u0"]
        with capture.connection() as connection:
            connection.execute(
                "UPDATE public.users SET tier = 'gold', updated_at = '10000-01-01 00:00:00+00'"
                " WHERE user_id = 'u0'"
            )
        wait_for(
            lambda: len(read_dead_letters(kafka.bootstrap_servers, dead_letter_topic)) == 1,
            60,
            "the undecodable row's dead letter",
            interval=1.0,
        )
        (letter,) = read_dead_letters(kafka.bootstrap_servers, dead_letter_topic)
        assert letter.reason == "bad_timestamp" and letter.source_topic == capture.topics["users"]
        assert letter.value is not None and json.loads(letter.value)["user_id"] == "u0"
        assert json.loads(letter.value)["updated_at"].startswith("+10000-01-01")
        wait_for(
            lambda: (_sample(scrape(metrics_url), SOURCE_COMMIT_APPLIED) or 0) > applied,
            30,
            "the batch that read the undecodable row",
        )
        assert view()["u0"] == before
        samples = scrape(metrics_url)
        dead = samples.get(
            f'{QUERY_PREFIX}dead_letters_total{{query="{QUERY}.dead-letters",reason="bad_timestamp"}}'
        )
        assert dead == 1.0, samples
    finally:
        prometheus.stop()
        job.stop()
    assert job.exit_code() is not None

"""Benchmark of the lag exporter beside danielqsj/kafka_exporter v1.9.0 on real local Kafka (issue 4).

For each size (partitions x consumer groups, by default {100, 1,000, 10,000} x {1, 10, 100} and 50,000 x 500;
`--sizes 10000x100,50000x500` picks some), on local KRaft brokers (one, or as many as the OS limits need for
the largest size: three for 50,000 partitions here, see cluster.py):
  1. our exporter (`python -m monitoring.lag_exporter`, a child process on a free port): the duration of its
     first collection (cold: every record timestamp is read) and of the next ones (warm), from its own
     `streamstack_lag_exporter_collection_duration_seconds`; scrape latency over N scrapes; RSS and peak RSS;
  2. then, with ours stopped, kafka_exporter (a child process on a free port of 127.0.0.1): scrape latency
     (it reads Kafka inside each scrape; scrapes are capped by a time budget per size), RSS and peak RSS;
  3. lag agreement: `kafka_consumergroup_lag{consumergroup,topic,partition}` against our
     `streamstack_lag_records{group,topic,partition}`, at rest (nothing produces or commits meanwhile);
  4. ours once more, a new process, for its first collection: an exporter restarted beside brokers that
     have served fetches before (those of step 1 had just been loaded).
In steps 1 and 4 also the CPU the exporter and the brokers used from the exporter's start to its first
snapshot, and in step 1 per warm refresh interval; the brokers' counted above their idle rate, measured just
before: they share the machine's cores with the exporter. Over the first snapshot the brokers' CPU is also
split by kind of thread: HotSpot's JIT compilers, its garbage collection and safepoints, the rest.
A scrape is what Prometheus 2.42 sends (its Accept header, `Accept-Encoding: gzip`) on a new connection,
timed from the request to the last byte of the body; only the last body is decompressed (for the lag
comparison), not every one the latency is measured on.

Layout: topics of 10 partitions (P/10 topics). Every topic is read by 3 consumer groups (1 when there is a
single group); a group reads a contiguous share of the topics, at least one: group g of G reads topics
[g*T/G, g*T/G + max(1, ceil(3T/G))) mod T. A size's groups are its own (`bench-p<P>-g<G>-<i>`), each exporter
is told to read only them (`--group-allow` / `--group.filter`), so the sizes do not disturb each other.
Records: 5 to 40 per partition (~100 bytes, create-time timestamps seconds to minutes old); committed offsets:
a quarter of the partitions caught up, the rest 0 to 7/8 of the way, so lag is non-zero and varied.

kafka_exporter is not built here: the Go module proxy refuses `github.com/danielqsj/kafka_exporter` (HTTP 403
"This module version is not available") although it serves its dependencies. Build it from a checkout of its
repository at tag v1.9.0 (`go build -o /somewhere/kafka_exporter .`) and pass the binary:

    make bench-exporter KAFKA_EXPORTER=/somewhere/kafka_exporter
    .venv/bin/python -m scripts.bench_exporter --kafka-exporter /somewhere/kafka_exporter \
        --partitions 100,1000 --groups 1,10    # a quick run
Writes JSON and a markdown table to --out (default .streamstack/bench/), and the raw results, compact, to
benchmarks/exporter-<date>[-<sizes>][-<label>].json (the sizes when they are not the default ones,
--label when given).

Setting up 50,000 partitions: a single broker here fails at ~19,500 partitions ("Too many open files" while
applying the topics' metadata; the load producer then timed out on metadata), so the load runs on as many
brokers as the descriptor and memory-map limits need (cluster.py). Topics are created 100 per request and the
load waits until every broker, not only the controller, knows every new partition's leader (otherwise
produce requests to the others fail with UNKNOWN_TOPIC_OR_PARTITION); records are written with librdkafka
(confluent-kafka).
"""

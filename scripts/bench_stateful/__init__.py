"""Throughput and state size of the two arbitrary-stateful jobs (view-bursts, order-state).

Per job: a topic preloaded with its input (page views of `--users` users 100 a second in event time with up
to 1 s of disorder; the order-event producer's generator with `--orders` orders open), the job's queries
started in one `local[2]` Spark session with the catalogue's settings and its own topics, and timed until
the main query has read every record. Reports events/s over the main query's batch time and over the wall
time from start, and the state operator's rows and bytes per key after the last batch; writes the raw
results to benchmarks/stateful-<date>[-label].json.
"""

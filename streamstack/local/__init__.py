"""The local runtime: real Kafka, Prometheus and PySpark jobs as child processes on 127.0.0.1."""

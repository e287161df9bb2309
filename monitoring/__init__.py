"""The lag exporter, Prometheus rules and dashboards."""

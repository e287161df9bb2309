"""The Pulumi program of streamstack (`Pulumi.yaml`: `main: infra/`): Strimzi Kafka, the Spark operator,
kube-prometheus-stack, the streaming jobs and the lag exporter. See infra/README.md."""

"""One ComponentResource per capability: KafkaCluster, SparkPlatform, Monitoring, StreamingJob,
LagExporter."""

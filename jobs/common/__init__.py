"""Code every streaming job uses: config, SparkSession, Kafka I/O and progress metrics."""

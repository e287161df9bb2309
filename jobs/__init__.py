"""PySpark Structured Streaming jobs and the code they share (Kafka I/O, progress metrics, config)."""

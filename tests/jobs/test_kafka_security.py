"""Kafka credentials for jobs and producers come from the environment and fail clearly."""

from __future__ import annotations

import pytest

from contracts.errors import ConfigError
from contracts.kafka_security import KafkaSecurity
from jobs.common.config import streaming_job_config, streaming_job_parser

JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="job-a" password="s3\\"cret";'
)


def test_the_default_is_plaintext_with_no_credentials() -> None:
    security = KafkaSecurity.from_environment({})
    assert security.spark_options() == {"kafka.security.protocol": "PLAINTEXT"}
    assert security.client_options() == {"security_protocol": "PLAINTEXT"}


def test_scram_settings_reach_spark_and_the_python_clients() -> None:
    security = KafkaSecurity.from_environment(
        {
            "STREAMSTACK_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "STREAMSTACK_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG": JAAS,
        }
    )
    assert security.spark_options() == {
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": JAAS,
    }
    assert security.client_options() == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "job-a",
        "sasl_plain_password": 's3"cret',
    }
    assert "s3" not in repr(security)


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"STREAMSTACK_KAFKA_SECURITY_PROTOCOL": "SASL"}, "STREAMSTACK_KAFKA_SECURITY_PROTOCOL 'SASL'"),
        ({"STREAMSTACK_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "STREAMSTACK_KAFKA_SASL_MECHANISM None"),
        (
            {
                "STREAMSTACK_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "STREAMSTACK_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            },
            "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG is required",
        ),
        (
            {"STREAMSTACK_KAFKA_SASL_MECHANISM": "PLAIN", "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG": JAAS},
            "need STREAMSTACK_KAFKA_SECURITY_PROTOCOL SASL_PLAINTEXT or SASL_SSL",
        ),
        (
            {
                "STREAMSTACK_KAFKA_SECURITY_PROTOCOL": "SSL",
                "STREAMSTACK_KAFKA_SSL_CA_FILE": "/no/such/ca.pem",
            },
            "STREAMSTACK_KAFKA_SSL_CA_FILE /no/such/ca.pem: no such file",
        ),
    ],
)
def test_bad_settings_fail_naming_the_variable(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")):
        KafkaSecurity.from_environment(environ)


def test_a_jaas_line_without_a_password_fails_without_echoing_it() -> None:
    line = (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="job-a" pasword="hunter2";'
    )
    with pytest.raises(ConfigError) as raised:
        KafkaSecurity.from_environment(
            {
                "STREAMSTACK_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "STREAMSTACK_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG": line,
            }
        )
    assert "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG" in str(raised.value)
    assert "hunter2" not in str(raised.value)


def test_a_job_config_reads_the_credentials_from_its_environment() -> None:
    args = streaming_job_parser("some-job", "a job", query_name="some-job").parse_args(
        [
            *("--bootstrap-servers", "127.0.0.1:9092", "--checkpoint-dir", "/tmp/checkpoints"),
            *("--dead-letter-topic", "dead-letters"),
        ]
    )
    config = streaming_job_config(
        args,
        {
            "STREAMSTACK_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "STREAMSTACK_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
            "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG": JAAS,
        },
    )
    assert config.kafka_security.sasl_mechanism == "SCRAM-SHA-256"
    assert config.kafka_security.client_options()["sasl_plain_username"] == "job-a"

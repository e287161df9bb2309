"""Kafka client security: the one set of environment variables every client of ours reads, and its reader.

The jobs, the producers and the lag exporter all log in the same way, from the same variables, which the
charts set from the client's KafkaUser Secret (Strimzi writes `sasl.jaas.config` into it) and the cluster CA
Secret, and which `streamstack rehearse` sets from the users it creates. Credentials never travel as flags.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.errors import ConfigError

SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

PROTOCOL_VARIABLE = "STREAMSTACK_KAFKA_SECURITY_PROTOCOL"
MECHANISM_VARIABLE = "STREAMSTACK_KAFKA_SASL_MECHANISM"
JAAS_VARIABLE = "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG"
CA_FILE_VARIABLE = "STREAMSTACK_KAFKA_SSL_CA_FILE"

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class KafkaSecurity:
    """How every Kafka client of ours (jobs, producers, the lag exporter) authenticates, from the environment.

    Credentials never travel as flags (a process listing would show them). In a cluster the values come from
    the job's KafkaUser Secret (Strimzi writes `sasl.jaas.config` into it):

        STREAMSTACK_KAFKA_SECURITY_PROTOCOL   PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL
        STREAMSTACK_KAFKA_SASL_MECHANISM      PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with SASL_*)
        STREAMSTACK_KAFKA_SASL_JAAS_CONFIG    the JAAS line with username and password (with SASL_*)
        STREAMSTACK_KAFKA_SSL_CA_FILE         PEM file of the CA that signed the brokers' certificates

    Spark's Kafka source and sink get these as `kafka.*` options (Spark redacts `sasl.jaas.config` in its
    logs); the kafka-python clients (shadow-group commits, topic checks, producers, the exporter) get the
    same settings as keyword arguments.
    """

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_jaas_config: str | None = field(default=None, repr=False)
    ssl_ca_file: str | None = None

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{PROTOCOL_VARIABLE} {self.security_protocol!r}: "
                f"expected one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        uses_sasl = self.security_protocol.startswith("SASL_")
        if not uses_sasl and (self.sasl_mechanism or self.sasl_jaas_config):
            raise ConfigError(
                f"{MECHANISM_VARIABLE} and {JAAS_VARIABLE} need "
                f"{PROTOCOL_VARIABLE} SASL_PLAINTEXT or SASL_SSL"
            )
        if uses_sasl:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ConfigError(
                    f"{MECHANISM_VARIABLE} {self.sasl_mechanism!r}: "
                    f"expected one of {', '.join(SASL_MECHANISMS)}"
                    f" with {PROTOCOL_VARIABLE} {self.security_protocol}"
                )
            if not self.sasl_jaas_config:
                raise ConfigError(
                    f"{JAAS_VARIABLE} is required with {PROTOCOL_VARIABLE} {self.security_protocol}"
                )
            options = self._jaas_options()
            if not options.get("username") or not options.get("password"):
                # Never echo the value: it holds the password.
                raise ConfigError(
                    f'{JAAS_VARIABLE}: expected username="..." and password="..." in the JAAS line'
                )
        if self.ssl_ca_file is not None:
            if not self.security_protocol.endswith("SSL"):
                raise ConfigError(f"{CA_FILE_VARIABLE} needs {PROTOCOL_VARIABLE} SSL or SASL_SSL")
            if not Path(self.ssl_ca_file).is_file():
                raise ConfigError(f"{CA_FILE_VARIABLE} {self.ssl_ca_file}: no such file")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> KafkaSecurity:
        return cls(
            security_protocol=environ.get(PROTOCOL_VARIABLE, "PLAINTEXT").strip() or "PLAINTEXT",
            sasl_mechanism=environ.get(MECHANISM_VARIABLE, "").strip() or None,
            sasl_jaas_config=environ.get(JAAS_VARIABLE, "").strip() or None,
            ssl_ca_file=environ.get(CA_FILE_VARIABLE, "").strip() or None,
        )

    @property
    def username(self) -> str | None:
        """The SASL user (the KafkaUser's name on a cluster); None without SASL."""
        return self._jaas_options().get("username") if self.sasl_jaas_config else None

    def _jaas_options(self) -> dict[str, str]:
        return {
            name: value.replace('\\"', '"').replace("\\\\", "\\")
            for name, value in _JAAS_OPTION.findall(self.sasl_jaas_config or "")
        }

    def spark_options(self) -> dict[str, str]:
        """`kafka.*` options for Spark's Kafka source and sink."""
        options = {"kafka.security.protocol": self.security_protocol}
        if self.sasl_mechanism is not None and self.sasl_jaas_config is not None:
            options["kafka.sasl.mechanism"] = self.sasl_mechanism
            options["kafka.sasl.jaas.config"] = self.sasl_jaas_config
        if self.ssl_ca_file is not None:
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = self.ssl_ca_file
        return options

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python's KafkaConsumer, KafkaProducer and KafkaAdminClient."""
        options: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.sasl_mechanism is not None:
            credentials = self._jaas_options()
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = credentials["username"]
            options["sasl_plain_password"] = credentials["password"]
        if self.ssl_ca_file is not None:
            options["ssl_cafile"] = self.ssl_ca_file
        return options


def jaas_config(user: str, password: str, login_module: str = SCRAM_LOGIN_MODULE) -> str:
    """The `sasl.jaas.config` line Strimzi writes into a SCRAM KafkaUser's Secret (JAAS_VARIABLE's value)."""
    escaped = [value.replace("\\", "\\\\").replace('"', '\\"') for value in (user, password)]
    return f'{login_module} required username="{escaped[0]}" password="{escaped[1]}";'

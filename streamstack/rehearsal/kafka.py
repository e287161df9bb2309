"""Kafka secured as the stack renders it, on one machine, for the cluster rehearsal.

What the rendered stack says (users, ACLs, topics, which workload logs in as whom) is read by
`streamstack.rehearsal.rendered_kafka`; this module runs it. The broker (`streamstack.local.kafka.LocalKafka`)
runs KRaft's StandardAuthorizer with `allow.everyone.if.no.acl.found=false`; each rendered `KafkaUser`
becomes a SCRAM-SHA-512 user with a random password and exactly its rendered ACLs. The controller and
inter-broker listeners authenticate the broker itself (SASL/PLAIN), and the rehearsal's own admin (topics,
users, ACLs) is the only other super user, as Strimzi's User Operator is on a cluster. A request an ACL does
not allow is refused (`TopicAuthorizationFailed`, ...) and logged by `kafka.authorizer.logger`, which
`acl_denials()` reads back.

    with RehearsalKafka.from_rendered(runtimes, workdir, rendered.manifests) as kafka:
        kafka.bootstrap_servers            # the SCRAM listener (SASL_SSL when the stack's clients use TLS)
        kafka.security_protocol, kafka.tls, kafka.ca_file
        kafka.client_environment("user-view")    # STREAMSTACK_KAFKA_* for a job, a producer or the exporter
        kafka.client_options("user-view")        # the same login as kafka-python keyword arguments
        kafka.acl_denials()      # {"User:user-view": ["Denied WRITE on Topic:LITERAL:x (Produce)"]}
        kafka.add_user(user)                     # one more user (e.g. a rendered one with an ACL removed)
        kafka.admin()                            # admin client as the rehearsal's super user

On one broker each topic gets replication factor 1 and `min.insync.replicas` at most 1; everything else is as
rendered. The broker's PLAINTEXT listener (`kafka.kafka.bootstrap_servers`) authenticates nobody: `ANONYMOUS`
may do nothing.

The users' passwords live in this process and in the environments handed to clients: never in an argv, the
broker's files or a log. The two super users' passwords are in the broker's server.properties only (0600).

The authorizer logs what it refuses, with one exception: a metadata request for *all* topics (kafka-python's
`KafkaConsumer.topics()`) is silently filtered to the topics the user may describe, so a topic without a
Describe ACL just looks absent there.
"""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from kafka import KafkaAdminClient

from contracts.kafka_security import (
    CA_FILE_VARIABLE,
    JAAS_VARIABLE,
    MECHANISM_VARIABLE,
    PROTOCOL_VARIABLE,
    KafkaSecurity,
    jaas_config,
)
from streamstack.errors import StreamstackError
from streamstack.local.kafka import LocalKafka
from streamstack.local.kafka_security import (
    AclAuthorization,
    SecuredListeners,
    TlsMaterial,
    make_tls_material,
)
from streamstack.rehearsal.rendered_kafka import (
    SCRAM_MECHANISM,
    RenderedKafkaTopic,
    RenderedKafkaUser,
    check_rendered_kafka,
    rendered_kafka_topics,
    rendered_kafka_users,
    rendered_security_protocol,
)
from streamstack.runtimes import Runtimes

PASSWORD_LENGTH = 32  # Strimzi's default generated SCRAM password length
# `[time] INFO Principal = User:x is Denied operation = WRITE from host = 127.0.0.1 on resource =
# Topic:LITERAL:t for request = Produce with resourceRefCount = 1 based on rule DefaultDeny`
_DENIAL = re.compile(
    r"Principal = (?P<principal>\S+) is Denied operation = (?P<operation>\S+) from host = \S+ "
    r"on resource = (?P<resource>\S+) for request = (?P<request>\S+)"
)

# --- the broker -----------------------------------------------------------------------------------------


def _password() -> str:
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(PASSWORD_LENGTH))


class RehearsalKafka:
    """A secured single-node broker holding the rendered topics, users and ACLs (module docstring)."""

    def __init__(
        self,
        runtimes: Runtimes,
        workdir: Path,
        users: Sequence[RenderedKafkaUser],
        topics: Sequence[RenderedKafkaTopic],
        *,
        tls: bool = False,
        heap: str = "512m",
    ) -> None:
        self.runtimes = runtimes
        self.workdir = workdir
        self.tls = tls
        self.heap = heap
        self.topics = list(topics)
        self.users: dict[str, RenderedKafkaUser] = {}
        self._passwords: dict[str, str] = {}
        self._authorization = AclAuthorization(broker_password=_password(), admin_password=_password())
        self._pending = list(users)
        reserved = {self._authorization.broker_user, self._authorization.admin_user}
        clashing = sorted(user.name for user in users if user.name in reserved)
        if clashing:
            raise StreamstackError(f"KafkaUser {clashing[0]}: the rehearsal's own super users use that name")
        self._tls_material: TlsMaterial | None = None
        self._kafka: LocalKafka | None = None

    @classmethod
    def from_rendered(
        cls,
        runtimes: Runtimes,
        workdir: Path,
        objects: Iterable[Mapping[str, Any]],
        *,
        tls: bool | None = None,
        heap: str = "512m",
    ) -> RehearsalKafka:
        """The broker of a rendered stack; TLS when its clients use SASL_SSL (unless `tls` says)."""
        manifests = list(objects)
        if tls is None:
            tls = rendered_security_protocol(manifests) == "SASL_SSL"
        check_rendered_kafka(manifests, tls)
        return cls(
            runtimes,
            workdir,
            rendered_kafka_users(manifests),
            rendered_kafka_topics(manifests),
            tls=tls,
            heap=heap,
        )

    # -- life cycle

    def start(self) -> RehearsalKafka:
        """Start the broker, create the topics, then each user with its ACLs."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        keystore = None
        if self.tls:
            self._tls_material = make_tls_material(self.runtimes.java, self.workdir / "tls", _password())
            keystore = self._tls_material.keystore
        secured = SecuredListeners((SCRAM_MECHANISM,), keystore, self._authorization)
        self._kafka = LocalKafka(self.runtimes, self.workdir / "kafka", heap=self.heap, secured=secured)
        try:
            self._kafka.start()
            self._kafka.create_topics([topic.single_broker_spec() for topic in self.topics])
            for user in self._pending:
                self.add_user(user)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._kafka is not None:
            self._kafka.stop()

    def __enter__(self) -> RehearsalKafka:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def kafka(self) -> LocalKafka:
        if self._kafka is None:
            raise StreamstackError("the rehearsal's Kafka has not been started")
        return self._kafka

    @property
    def pid(self) -> int:
        return self.kafka.pid

    def admin(self) -> KafkaAdminClient:
        """An admin client logged in as the rehearsal's super user (not one of the rendered users)."""
        return self.kafka.admin()

    def add_user(self, user: RenderedKafkaUser) -> None:
        """Create the user's SCRAM-SHA-512 credential (a new random password) and exactly its ACL bindings."""
        if user.name in self.users:
            raise StreamstackError(f"KafkaUser {user.name} exists already in the rehearsal")
        password = _password()
        self.kafka.add_scram_user(user.name, password, SCRAM_MECHANISM)
        bindings = user.bindings()
        if bindings:
            admin = self.admin()
            try:
                result = admin.create_acls(bindings)
            finally:
                admin.close()
            if result["failed"]:
                raise StreamstackError(
                    f"creating the ACLs of KafkaUser {user.name} failed: {result['failed'][0]}"
                )
        self.users[user.name] = user
        self._passwords[user.name] = password

    # -- what clients need

    @property
    def security_protocol(self) -> str:
        return "SASL_SSL" if self.tls else "SASL_PLAINTEXT"

    @property
    def bootstrap_servers(self) -> str:
        """The client listener of the rendered protocol (SCRAM, over TLS when `tls`)."""
        return self.kafka.address(self.security_protocol)

    @property
    def ca_file(self) -> Path | None:
        """PEM of the CA clients trust for SASL_SSL (the broker's self-signed certificate), else None."""
        return self._tls_material.ca_certificate if self._tls_material is not None else None

    def _login(self, user: str) -> tuple[str, str]:
        if user not in self._passwords:
            raise StreamstackError(
                f"no KafkaUser {user!r} in the rehearsal (users: {', '.join(sorted(self.users))})"
            )
        return user, self._passwords[user]

    def client_environment(self, user: str) -> dict[str, str]:
        """The variables every client of ours reads (contracts/kafka_security.py: jobs, producers, the lag
        exporter) to log in as `user`, as a cluster hands them over from the user's Secret."""
        name, password = self._login(user)
        environment = {
            PROTOCOL_VARIABLE: self.security_protocol,
            MECHANISM_VARIABLE: SCRAM_MECHANISM,
            JAAS_VARIABLE: jaas_config(name, password),
        }
        if self.ca_file is not None:
            environment[CA_FILE_VARIABLE] = str(self.ca_file)
        return environment

    def client_options(self, user: str) -> dict[str, Any]:
        """kafka-python keyword arguments (bootstrap servers included) to log in as `user`."""
        security = KafkaSecurity.from_environment(self.client_environment(user))
        return {"bootstrap_servers": self.bootstrap_servers, **security.client_options()}

    # -- what the broker refused

    @property
    def authorizer_log_path(self) -> Path:
        return self.kafka.authorizer_log_path

    def acl_denials(self) -> dict[str, list[str]]:
        """Principal (`User:<name>`) -> its distinct denials in the order first logged, each as
        `Denied <OPERATION> on <Type>:<PATTERN>:<name> (<request>)`, from the broker's authorizer log."""
        path = self.authorizer_log_path
        if not path.exists():
            return {}
        denials: dict[str, dict[str, None]] = {}
        for line in path.read_text(errors="replace").splitlines():
            match = _DENIAL.search(line)
            if match:
                text = f"Denied {match['operation']} on {match['resource']} ({match['request']})"
                denials.setdefault(match["principal"], {})[text] = None
        return {principal: list(lines) for principal, lines in denials.items()}

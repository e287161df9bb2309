"""The security of a local broker's client listeners: SCRAM, a TLS identity, ACL enforcement.

`SecuredListeners` says which secured listeners `streamstack.local.kafka.LocalKafka` adds beside PLAINTEXT;
`make_tls_material` makes the self-signed broker certificate (and the PEM clients trust) for the TLS ones.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from streamstack.errors import StreamstackError
from streamstack.local.ports import LOOPBACK

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class BrokerKeystore:
    """The broker's TLS identity: a PKCS12 keystore holding its key and certificate chain."""

    path: Path
    password: str = field(repr=False)


@dataclass(frozen=True)
class TlsMaterial:
    """What `make_tls_material` produced: the broker's keystore and the certificate clients trust."""

    keystore: BrokerKeystore
    ca_certificate: Path  # PEM, for a client's ssl_cafile (self-signed: it is its own CA)


@dataclass(frozen=True)
class AclAuthorization:
    """ACLs enforced, with two super users authenticated by SASL/PLAIN (see the module docstring). The
    passwords only reach server.properties (mode 0600), never an argv or a log."""

    broker_password: str = field(repr=False)
    admin_password: str = field(repr=False)
    broker_user: str = "streamstack-broker"
    admin_user: str = "streamstack-admin"

    @property
    def super_users(self) -> tuple[str, ...]:
        return (f"User:{self.broker_user}", f"User:{self.admin_user}")


@dataclass(frozen=True)
class SecuredListeners:
    """Secured client listeners to add beside PLAINTEXT (see the module docstring)."""

    scram_mechanisms: tuple[str, ...] = ()
    keystore: BrokerKeystore | None = None
    authorization: AclAuthorization | None = None

    def __post_init__(self) -> None:
        unknown = [mechanism for mechanism in self.scram_mechanisms if mechanism not in SCRAM_MECHANISMS]
        if unknown:
            raise StreamstackError(
                f"scram_mechanisms {unknown[0]!r}: expected one of {', '.join(SCRAM_MECHANISMS)}"
            )
        if not self.scram_mechanisms and self.keystore is None:
            raise StreamstackError("SecuredListeners needs scram_mechanisms, a keystore, or both")
        if self.authorization is not None and not self.scram_mechanisms:
            raise StreamstackError("SecuredListeners(authorization=...) needs scram_mechanisms (its clients)")

    @property
    def protocols(self) -> tuple[str, ...]:
        """The security protocols of the secured listeners, each one listener named after it."""
        protocols = []
        if self.scram_mechanisms:
            protocols.append("SASL_PLAINTEXT")
        if self.keystore is not None:
            protocols.append("SSL")
            if self.scram_mechanisms:
                protocols.append("SASL_SSL")
        return tuple(protocols)


def make_tls_material(java: Path, directory: Path, password: str, host: str = LOOPBACK) -> TlsMaterial:
    """A self-signed broker certificate for `host` (an IP SAN, so clients verify the host name) in a PKCS12
    keystore, and the same certificate as PEM for clients to trust; made with the keytool next to `java`
    (two JVM starts, not the five of a CA-signed chain). The store password reaches keytool through its
    environment, never its argv."""
    keytool = java.parent / "keytool"
    if not os.access(keytool, os.X_OK):
        raise StreamstackError(f"no keytool next to {java}: a JDK (not only a JRE) is needed for TLS")
    directory.mkdir(parents=True, exist_ok=True)
    keystore, certificate = directory / "broker.p12", directory / "broker.pem"
    env = {**os.environ, "STREAMSTACK_STORE_PASSWORD": password}
    store = [
        "-keystore",
        str(keystore),
        "-storetype",
        "PKCS12",
        "-storepass:env",
        "STREAMSTACK_STORE_PASSWORD",
    ]
    fast_jvm = ["-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC"]
    new_key = ["-keyalg", "RSA", "-keysize", "2048", "-validity", "2"]
    for step in (
        ["-genkeypair", "-alias", "broker", "-dname", f"CN={host}", "-ext", f"SAN=ip:{host}", *new_key],
        ["-exportcert", "-rfc", "-alias", "broker", "-file", str(certificate)],
    ):
        argv = [str(keytool), *fast_jvm, *step, *store]
        result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=120)
        if result.returncode != 0:
            raise StreamstackError(f"keytool {step[0]} failed: {(result.stderr or result.stdout).strip()}")
    return TlsMaterial(BrokerKeystore(keystore, password), certificate)

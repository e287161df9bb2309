"""A local PostgreSQL 15 (Debian's, unpacked from the lock) on 127.0.0.1, ready for logical decoding.

Its own data directory (`initdb` on first start, kept across restarts), `wal_level=logical` and room for
replication slots, TCP on 127.0.0.1 only (no Unix socket), SCRAM passwords for every TCP connection. The
bootstrap superuser `streamstack` gets a random password, kept in `<workdir>/postgres-password` (mode 0600)
for the clients the stack starts; it reaches initdb through a file, never an argv.

PostgreSQL refuses to run as root. When the stack runs as root, initdb and postgres run as the unprivileged
user nobody (uid/gid 65534, through `setpriv --reuid=65534 --regid=65534 --clear-groups`), and the data
directory must be a place nobody can reach: `<workdir>/postgres` if every directory above it lets others
through, else a directory of its own under the system's temporary directory (pytest's tmp dirs are 0700
root), named in `<workdir>/postgres-data` and removed by `remove_data()`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from streamstack.errors import StreamstackError
from streamstack.local.ports import LOOPBACK
from streamstack.local.process import ManagedProcess
from streamstack.local.service import LocalService
from streamstack.runtimes import Runtimes
from streamstack.runtimes.cdc import postgresql_environment
from streamstack.runtimes.lock import CdcRuntimes

UNPRIVILEGED_ID = 65534  # nobody / nogroup
SUPERUSER = "streamstack"


def _others_can_reach(path: Path) -> bool:
    """Whether every directory from / to `path` lets other users through (o+x)."""
    for directory in [path, *path.parents]:
        with contextlib.suppress(FileNotFoundError):
            if not directory.stat().st_mode & 0o001:
                return False
    return True


class LocalPostgres(LocalService):
    """initdb (first start), start, wait until it answers, create the database, stop; restart on the same
    data directory."""

    name = "postgres"
    title = "PostgreSQL"
    port_flag = "--postgres-port"
    stop_timeout = 30.0

    def __init__(
        self, runtimes: Runtimes, cdc: CdcRuntimes, workdir: Path, database: str, port: int = 0
    ) -> None:
        super().__init__(runtimes, workdir, port)
        self.cdc = cdc
        self.database = database
        self.user = SUPERUSER
        self._as_root = os.geteuid() == 0
        self.password_path = workdir / "postgres-password"

    # --- where things are -------------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        pointer = self.workdir / "postgres-data"
        if pointer.exists():
            return Path(pointer.read_text().strip())
        return self.workdir / "postgres"

    def _choose_data_dir(self) -> Path:
        inside = self.workdir / "postgres"
        if not self._as_root or _others_can_reach(self.workdir):
            return inside
        digest = hashlib.sha256(str(self.workdir.resolve()).encode()).hexdigest()[:12]
        outside = Path(tempfile.gettempdir()) / f"streamstack-postgres-{digest}"
        (self.workdir / "postgres-data").write_text(f"{outside}\n")
        return outside

    @property
    def password(self) -> str:
        return self.password_path.read_text().strip()

    def conninfo(self, database: str | None = None) -> str:
        """A libpq connection string for the superuser (password included: not for logs)."""
        return psycopg.conninfo.make_conninfo(
            host=LOOPBACK,
            port=self.port,
            dbname=database or self.database,
            user=self.user,
            password=self.password,
            connect_timeout=3,
        )

    def connect(self, database: str | None = None, autocommit: bool = True) -> psycopg.Connection:
        return psycopg.connect(self.conninfo(database), autocommit=autocommit)

    # --- running it ------------------------------------------------------------------------------------

    def _as_server_user(self, argv: list[str]) -> list[str]:
        if not self._as_root:
            return argv
        ids = str(UNPRIVILEGED_ID)
        return ["setpriv", f"--reuid={ids}", f"--regid={ids}", "--clear-groups", *argv]

    def _chown(self, path: Path) -> None:
        if self._as_root:
            os.chown(path, UNPRIVILEGED_ID, UNPRIVILEGED_ID)

    def _initdb(self) -> None:
        data_dir = self._choose_data_dir()
        if data_dir.exists():
            shutil.rmtree(data_dir)  # a half-made earlier one: initdb needs it empty
        data_dir.mkdir(mode=0o700, parents=True)
        self._chown(data_dir)
        self.password_path.touch(mode=0o600)
        self.password_path.write_text(secrets.token_urlsafe(24) + "\n")
        # initdb reads the password from a file the server user can read, removed right after.
        pwfile = data_dir.parent / f".{data_dir.name}.pw"
        pwfile.touch(mode=0o600)
        self._chown(pwfile)
        pwfile.write_text(self.password + "\n")
        argv = [
            str(self.cdc.postgresql_bin / "initdb"),
            f"--pgdata={data_dir}",
            f"--username={self.user}",
            f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256",
            "--auth-local=scram-sha-256",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",
        ]
        try:
            result = subprocess.run(
                self._as_server_user(argv),
                env=postgresql_environment(self.cdc),
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise StreamstackError(f"initdb failed: {(result.stderr or result.stdout).strip()[-800:]}")

    def _server_argv(self) -> list[str]:
        settings = {
            "listen_addresses": LOOPBACK,
            "port": str(self.port),
            "unix_socket_directories": "",
            "wal_level": "logical",
            "max_wal_senders": "5",
            "max_replication_slots": "5",
            "shared_buffers": "64MB",
            "max_connections": "40",
        }
        argv = [str(self.cdc.postgresql_bin / "postgres"), "-D", str(self.data_dir)]
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        return self._as_server_user(argv)

    def start(self, timeout: float = 60.0) -> LocalPostgres:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not (self.data_dir / "PG_VERSION").exists() or not self.password_path.exists():
            self._initdb()
        self._launch_server()
        self._wait_until_ready(timeout)
        self._create_database()
        return self

    def _launch_server(self) -> None:
        self._process = ManagedProcess(
            self.name, self._server_argv(), self.log_path, env=postgresql_environment(self.cdc)
        )
        self._process.start(on_start=self._on_launch)

    def restart(self, timeout: float = 60.0) -> LocalPostgres:
        """Start the stopped server again on its port and data directory."""
        if self._process is None:
            raise StreamstackError(f"{self.title} has not been started")
        if self._process.is_running():
            raise StreamstackError(f"{self.title} is running (pid {self._process.pid}); stop it first")
        self._launch_server()
        self._wait_until_ready(timeout)
        return self

    def _wait_until_ready(self, timeout: float) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout
        last_error = "no attempt"
        while time.monotonic() < deadline:
            if not self._process.is_running():
                raise StreamstackError(
                    f"PostgreSQL exited with code {self._process.exit_code()} while starting: "
                    f"{self._process.log_tail(5)} (see {self.log_path})"
                )
            try:
                with self.connect("postgres"):
                    return
            except psycopg.OperationalError as error:
                last_error = str(error).strip()
                time.sleep(0.2)
        self.stop()
        raise StreamstackError(
            f"PostgreSQL did not answer on {LOOPBACK}:{self.port} within {timeout:.0f} s: {last_error}"
        )

    def _create_database(self) -> None:
        with self.connect("postgres") as connection:
            exists = connection.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)
            ).fetchone()
            if exists is None:
                connection.execute(
                    psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(self.database))
                )

    def stop(self) -> None:
        """A fast shutdown (SIGINT to the postmaster: sessions and walsenders end, a checkpoint is written),
        then whatever is left of the group goes the usual way."""
        if self._process is not None and self._process.is_running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, signal.SIGINT)
            deadline = time.monotonic() + self.stop_timeout
            while self._process.is_running() and time.monotonic() < deadline:
                time.sleep(0.1)
        super().stop()

    def remove_data(self) -> None:
        """Remove the data directory (when it lives outside the work directory, nothing else would)."""
        shutil.rmtree(self.data_dir, ignore_errors=True)

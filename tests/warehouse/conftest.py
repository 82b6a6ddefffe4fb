"""A real PostgreSQL server for the warehouse tests, started once per session on loopback.

``initdb`` into a temporary folder, ``pg_ctl start`` on 127.0.0.1 with a random free port and the unix
socket in the same folder (as the ``postgres`` OS user when the tests run as root: the server refuses
to run as root), a login role with a password (SCRAM over TCP), then stop and remove everything.
The server binaries are looked up in ``/usr/lib/postgresql/<version>/bin`` (Debian/Ubuntu; ``.ci/run``
installs them with apt when missing) and on ``PATH``; only when there are none do the tests skip.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PASSWORD_ENV = "CROWDFLOW_TEST_PG_PASSWORD"
ROLE = "crowdflow"
DATABASE = "crowdflow"


@dataclass(frozen=True)
class PgServer:
    """A running test server: ``url`` has no password; the password is in ``os.environ[password_env]``."""

    url: str
    password: str
    password_env: str
    host: str
    port: int
    data_dir: Path


def _bin_dir() -> Path | None:
    def version(p: str) -> float:
        try:
            return float(Path(p).parents[1].name)
        except ValueError:
            return 0.0

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    runuser = shutil.which("runuser")
    if runuser is None:
        raise RuntimeError("running as root but runuser is missing: cannot start PostgreSQL as the postgres user")
    return [runuser, "-u", "postgres", "--", *cmd]


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """Start a throw-away PostgreSQL on 127.0.0.1; yields its URL, the password and the env var holding it."""
    bindir = _bin_dir()
    if bindir is None:
        pytest.skip(
            "no PostgreSQL server binaries (initdb) under /usr/lib/postgresql/*/bin or on PATH; "
            "install them (apt-get install postgresql; .ci/run does this) to run the PostgreSQL tests"
        )
    root = Path(tempfile.mkdtemp(prefix="crowdflow-pg-"))
    data, sock, log = root / "data", root / "sock", root / "server.log"
    sock.mkdir()
    pwfile = root / "admin.pw"
    admin_pw = secrets.token_hex(16)
    pwfile.write_text(admin_pw + "\n")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        for p in (sock, pwfile):
            shutil.chown(p, "postgres", "postgres")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    _run(
        _as_server_user(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--pwfile",
                str(pwfile),
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        ),
        env=env,
    )
    pg_ctl = str(bindir / "pg_ctl")
    port = 0
    started = False
    for _attempt in range(3):  # a random free port can be taken between the probe and the start
        port = _free_port()
        opts = f"-h 127.0.0.1 -p {port} -k {sock} -c fsync=off -c full_page_writes=off"
        res = subprocess.run(
            _as_server_user([pg_ctl, "-D", str(data), "-l", str(log), "-o", opts, "-w", "-t", "60", "start"]),
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if res.returncode == 0:
            started = True
            break
        time.sleep(0.5)
    if not started:
        tail = log.read_text()[-2000:] if log.exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start ({bindir}): {res.stderr}\n{tail}")
    password = secrets.token_urlsafe(18)
    psql = _as_server_user(
        [str(bindir / "psql"), "-h", str(sock), "-p", str(port), "-U", "postgres", "-v", "ON_ERROR_STOP=1"]
    )
    try:
        _run([*psql, "-d", "postgres", "-c", f"CREATE ROLE {ROLE} LOGIN PASSWORD '{password}'"], env=env)
        _run([*psql, "-d", "postgres", "-c", f"CREATE DATABASE {DATABASE} OWNER {ROLE}"], env=env)
        previous = os.environ.get(PASSWORD_ENV)
        os.environ[PASSWORD_ENV] = password
        try:
            yield PgServer(
                url=f"postgresql://{ROLE}@127.0.0.1:{port}/{DATABASE}",
                password=password,
                password_env=PASSWORD_ENV,
                host="127.0.0.1",
                port=port,
                data_dir=data,
            )
        finally:
            if previous is None:
                os.environ.pop(PASSWORD_ENV, None)
            else:
                os.environ[PASSWORD_ENV] = previous
    finally:
        subprocess.run(
            _as_server_user([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"]),
            capture_output=True,
            env=env,
            check=False,
        )
        shutil.rmtree(root, ignore_errors=True)

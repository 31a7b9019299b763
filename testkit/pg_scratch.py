"""A throwaway PostgreSQL cluster, for the tests and benchmarks (never used by the server itself).

`scratch_cluster()` runs initdb into a temporary folder (as user postgres when running as root,
since PostgreSQL refuses to run as root), starts it on a free port of 127.0.0.1 with trust auth,
yields a superuser URL and removes everything afterwards. `new_database(url)` adds an empty
database to it.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url


def _binary(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name) or ""]
    if not found[-1]:
        raise RuntimeError(
            f"PostgreSQL's {name} was not found: install PostgreSQL (apt-get install postgresql) or give "
            "the URL of a running server (TEST_POSTGRES_URL)"
        )
    return found[-1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def scratch_cluster(max_connections: int = 300) -> Iterator[str]:
    root = Path(tempfile.mkdtemp(prefix="autoresearch-pg-"))
    data, port = root / "data", free_port()
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_postgres:
        shutil.chown(root, "postgres")
    try:
        subprocess.run(
            [
                *as_postgres,
                _binary("initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
        )
        options = (
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
            f"-c max_connections={max_connections}"
        )
        subprocess.run(
            [
                *as_postgres,
                _binary("pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(root / "log"),
                "-w",
                "start",
            ],
            check=True,
            capture_output=True,
        )
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                [*as_postgres, _binary("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                capture_output=True,
            )
        shutil.rmtree(root, ignore_errors=True)


def new_database(server_url: str) -> str:
    """A fresh, empty database on the server at `server_url`; its URL."""
    url = make_url(server_url)
    name = f"t_{uuid.uuid4().hex[:12]}"
    _administer(server_url, f'CREATE DATABASE "{name}"')
    return url.set(database=name).render_as_string(hide_password=False)


def copy_database(template_url: str, database_url: str) -> None:
    """Replace the database at `database_url` by a copy of the one at `template_url` (same server;
    nobody may be connected to either): PostgreSQL copies its files, far quicker than migrating."""
    template, target = make_url(template_url).database, make_url(database_url).database
    maintenance = make_url(database_url).set(database="postgres").render_as_string(hide_password=False)
    _administer(maintenance, f'DROP DATABASE "{target}"', f'CREATE DATABASE "{target}" TEMPLATE "{template}"')


def _administer(connect_url: str, *statements: str) -> None:
    """Run `statements` outside a transaction, connected to the database of `connect_url`."""
    url = make_url(connect_url)
    with psycopg.connect(
        host=url.host,
        port=url.port,
        user=url.username,
        password=url.password,
        dbname=url.database,
        autocommit=True,
    ) as connection:
        for statement in statements:
            connection.execute(statement)

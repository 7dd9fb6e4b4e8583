"""A real SSH server for git-over-SSH tests: Debian's OpenSSH ``sshd`` on loopback, with a fresh host key
and one authorised client key, logging in as the user running the tests (git runs through their shell).

    with ssh_server() as ssh:      # ssh.url_for(bare_repo) -> ssh://user@127.0.0.1:PORT/abs/path.git
        secret = {"identity": ssh.client_key, "known_hosts": ssh.known_hosts}

``make install`` installs the openssh-server package (hack/install-system.sh).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.server import bound_socket

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class SshServer:
    port: int
    user: str
    client_key: str  # the private key a Secret's `identity` holds
    known_hosts: str  # the line a Secret's `known_hosts` holds

    def url_for(self, bare: Path) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{bare.resolve()}"


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def _start(home: Path, user: str) -> tuple[int, subprocess.Popen | None]:
    """sshd on a port the kernel just handed out. sshd cannot bind port 0, and another process may take
    the port first: sshd writes its PidFile only once it listens, and exits when it cannot bind, so
    either says whose port it is (a connection could be answered by someone else's server).
    (port, None): the port was taken; try another."""
    with bound_socket() as probe:
        port = probe.getsockname()[1]
    pid_file = home / "sshd.pid"
    pid_file.unlink(missing_ok=True)
    (home / "sshd_config").write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {home / 'host'}", f"PidFile {pid_file}",
        f"AuthorizedKeysFile {home / 'authorized_keys'}", "StrictModes no", "UsePAM no",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password", f"AllowUsers {user}", "LogLevel ERROR", ""]))
    errors = home / "sshd.err"
    with errors.open("wb") as err:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(home / "sshd_config")], stderr=err)
    deadline = time.monotonic() + 20
    while not pid_file.exists():
        if proc.poll() is not None:
            text = errors.read_text(errors="replace")
            if "Address already in use" in text or "Cannot bind" in text:
                return port, None
            raise RuntimeError(f"sshd did not start: {text}")
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"sshd did not start in 20 s: {errors.read_text(errors='replace')}")
        time.sleep(0.05)
    return port, proc


@contextlib.contextmanager
def ssh_server() -> Iterator[SshServer]:
    if not os.access(SSHD, os.X_OK):
        raise RuntimeError(f"{SSHD} not found: install Debian's openssh-server (make install does)")
    with tempfile.TemporaryDirectory(prefix="ragengine-sshd-") as tmp:
        home = Path(tmp)
        _keygen(home / "host")
        _keygen(home / "client")
        (home / "authorized_keys").write_text((home / "client.pub").read_text())
        user = getpass.getuser()
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation directory
        proc: subprocess.Popen | None = None
        for _ in range(5):
            port, proc = _start(home, user)
            if proc is not None:
                break
        if proc is None:
            raise RuntimeError("sshd found no free port in 5 attempts")
        try:
            host_key = (home / "host.pub").read_text().split()
            yield SshServer(port, user, (home / "client").read_text(), f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
        finally:
            proc.terminate()
            proc.wait(timeout=10)

"""A real git server for tests: Debian's ``git http-backend`` (CGI) behind a small threaded HTTP server on
loopback, with optional Basic auth, serving the bare repositories under one folder.

    with git_http_server(root, auth=("user", "token")) as base:   # base = "http://127.0.0.1:PORT"
        clone base + "/docs.git"
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

BACKEND_CANDIDATES = ("/usr/lib/git-core/git-http-backend", "/usr/libexec/git-core/git-http-backend")


def backend() -> str:
    for path in BACKEND_CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=True).stdout.strip()
    path = os.path.join(exec_path, "git-http-backend")
    if os.access(path, os.X_OK):
        return path
    raise RuntimeError("git http-backend not found: install Debian's git (apt-get install git)")


@contextlib.contextmanager
def git_http_server(root: Path, auth: tuple[str, str] | None = None, host: str = "127.0.0.1",
                    seen: list[dict[str, str]] | None = None) -> Iterator[str]:
    """``host``: the machine's own address for a server that pods on the real node must reach. ``seen``: the
    headers of every request received are appended to it."""
    program = backend()
    expected = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode() if auth else None

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def _cgi(self) -> None:
            if seen is not None:
                seen.append({k.lower(): v for k, v in self.headers.items()})
            if expected and self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": str(root),
                   "GIT_HTTP_EXPORT_ALL": "1", "REQUEST_METHOD": self.command, "PATH_INFO": url.path,
                   "QUERY_STRING": url.query, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                   "CONTENT_LENGTH": str(length), "REMOTE_USER": auth[0] if auth else "",
                   "REMOTE_ADDR": "127.0.0.1", "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", "")}
            proc = subprocess.run([program], input=body, env=env, capture_output=True, timeout=120)
            head, _, payload = proc.stdout.partition(b"\r\n\r\n")
            if not _:
                head, _, payload = proc.stdout.partition(b"\n\n")
            status, headers = 200, []
            for line in head.decode("latin-1").splitlines():
                key, _, value = line.partition(":")
                if key.lower() == "status":
                    status = int(value.strip().split()[0])
                elif key:
                    headers.append((key, value.strip()))
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _cgi

    server = ThreadingHTTPServer((host, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class Repo:
    """A working repository that pushes to a bare one served by ``git_http_server``."""

    def __init__(self, root: Path, name: str = "docs") -> None:
        self.bare = root / f"{name}.git"
        self.work = root / f"{name}-work"
        subprocess.run(["git", "init", "--bare", "--quiet", "-b", "main", str(self.bare)], check=True)
        # as GitHub and GitLab do: partial fetches (--filter=blob:limit) are served
        subprocess.run(["git", "-C", str(self.bare), "config", "uploadpack.allowFilter", "true"], check=True)
        subprocess.run(["git", "init", "--quiet", "-b", "main", str(self.work)], check=True)
        self.git("remote", "add", "origin", str(self.bare))

    def git(self, *args: str) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@x"}
        return subprocess.run(["git", "-C", str(self.work), *args], check=True, capture_output=True, text=True,
                              env=env).stdout.strip()

    def write(self, path: str, content: str | bytes) -> None:
        target = self.work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))

    def remove(self, path: str) -> None:
        (self.work / path).unlink()

    def move(self, old: str, new: str) -> None:
        (self.work / new).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(self.work / old, self.work / new)

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "--quiet", "-m", message)
        self.git("push", "--quiet", "origin", "main")
        return self.git("rev-parse", "HEAD")

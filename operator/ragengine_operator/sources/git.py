"""Git sources: the ``git`` CLI, one shallow fetch of the ref into a cache folder per source and URL; the
revision is the commit id, and a commit equal to the last synced one is not read at all.

What a hostile repository or spec cannot do here:

- reach a host the egress policy refuses: the URL's host is resolved and checked before git runs,
  and git connects to that address (``http.curloptResolve`` for http(s), ssh's ``HostName`` with the
  name kept as ``HostKeyAlias`` for ssh); git follows no redirect (``http.followRedirects=false``)
  and speaks only the URL's own protocol (``protocol.allow=never`` otherwise);
- send credentials elsewhere: the Basic header is scoped to the URL (``http.<url>.extraHeader``) and
  travels in ``GIT_CONFIG_*`` environment variables, never on a command line or in a URL;
- pass an option as a ref or URL: ``--end-of-options`` precedes them (and the spec refuses a ``-`` ref);
- exhaust memory or disk: blobs over the per-file limit are never downloaded
  (``--filter=blob:limit``, where the server supports it) and never read; the matching files are
  counted and sized before any is read, against the source's caps; blobs are streamed from one
  ``git cat-file --batch`` one at a time, exactly ``size`` bytes each;
- freeze the process with a glob: ``paths`` (gitignore syntax) match through RE2, in time linear in
  the path's length (pathspec's ``re2`` backend), with at most ``MAX_WILDCARDS`` ``*`` per glob;
- run past the fetch's deadline: every git command gets the time left, and is killed at the deadline.

Symlinks and submodules are skipped; blobs are read from the object database, never checked out.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pathspec

from ragengine_operator.net.egress import EgressDenied, EgressPolicy, Pinned, pin
from ragengine_operator.sources.fetched import Deadline, Fetched, FetchError, FetchLimits, extract, too_large

MAX_WILDCARDS = 16
_SCP_LIKE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?(\[[^\]]+\]|[A-Za-z0-9.-]+):")


@dataclass(frozen=True)
class GitCredentials:
    username: str | None = None
    password: str | None = None  # or a token
    identity: str | None = None  # SSH private key
    known_hosts: str | None = None


@dataclass(frozen=True)
class Remote:
    scheme: str  # https, http or ssh
    host: str
    port: int


def remote(url: str) -> Remote:
    """The scheme, host and port git will connect to for ``url`` (https://, http://, ssh://, user@host:path)."""
    parts = urlsplit(url)
    if parts.scheme in ("https", "http", "ssh"):
        default = {"https": 443, "http": 80, "ssh": 22}[parts.scheme]
        try:
            port = parts.port or default
        except ValueError as exc:
            raise FetchError(f"invalid url {url}: {exc}") from None
        host = (parts.hostname or "").encode("idna").decode("ascii") if parts.hostname else ""
        return Remote(parts.scheme, host, port)
    found = _SCP_LIKE.match(url)
    if found:
        return Remote("ssh", found.group(1).strip("[]"), 22)
    raise FetchError(f"url must be https://, http://, ssh:// or user@host:path, not {url}")


def compile_paths(paths: list[str]) -> pathspec.PathSpec:
    for glob in paths:
        if glob.count("*") > MAX_WILDCARDS:
            raise FetchError(f"git.paths: {glob!r} has more than {MAX_WILDCARDS} '*'")
    try:
        return pathspec.PathSpec.from_lines("gitignore", paths or ["**"], backend="re2")
    except Exception as exc:  # an invalid pattern, or one RE2 will not compile
        raise FetchError(f"git.paths cannot be used: {type(exc).__name__}: {exc}") from None


def _git_env(url: str, where: Remote, to: Pinned, creds: GitCredentials | None, scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GIT_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true", GIT_CONFIG_NOSYSTEM="1", HOME=str(scratch),
               GIT_NO_LAZY_FETCH="1")
    pairs: list[tuple[str, str]] = [("protocol.allow", "never"), (f"protocol.{where.scheme}.allow", "always"),
                                    ("http.followRedirects", "false")]
    if where.scheme in ("https", "http"):
        address = f"[{to.address}]" if to.address.version == 6 else str(to.address)
        pairs.append(("http.curloptResolve", f"{where.host}:{where.port}:{address}"))
        if creds and creds.password is not None:
            token = base64.b64encode(f"{creds.username or 'git'}:{creds.password}".encode()).decode()
            pairs.append((f"http.{url}.extraHeader", f"Authorization: Basic {token}"))
    else:
        alias = where.host if where.port == 22 else f"[{where.host}]:{where.port}"
        ssh = ["ssh", "-o", f"HostName={to.address}", "-o", f"HostKeyAlias={alias}", "-o", "StrictHostKeyChecking=yes",
               "-o", "BatchMode=yes", "-o", "ProxyCommand=none", "-o", "ProxyJump=none"]
        hosts = scratch / "known_hosts"
        hosts.write_text((creds.known_hosts or "") if creds else "")
        ssh += ["-o", f"UserKnownHostsFile={hosts}"]
        if creds and creds.identity is not None:
            key = scratch / "identity"
            key.write_text(creds.identity if creds.identity.endswith("\n") else creds.identity + "\n")
            key.chmod(0o600)
            ssh += ["-i", str(key), "-o", "IdentitiesOnly=yes"]
        env["GIT_SSH_COMMAND"] = " ".join(ssh)
        env["GIT_SSH_VARIANT"] = "ssh"
    env["GIT_CONFIG_COUNT"] = str(len(pairs))
    for i, (k, v) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = k, v
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    """git runs helpers (git-remote-http, ssh, index-pack): at the deadline they all go, not just git."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _git(args: list[str], cwd: Path, env: dict[str, str], deadline: Deadline) -> bytes:
    with subprocess.Popen(["git", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=deadline.at - deadline.clock())
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            raise deadline.error(f"git {args[0]}") from None
        finally:
            _kill_group(proc)  # helpers left behind by a git that exited
    if proc.returncode != 0:
        lines = [x.strip() for x in err.decode("utf-8", "replace").splitlines() if x.strip()]
        raise FetchError(_explain(lines) if lines else f"git {args[0]} failed ({proc.returncode})")
    return out


def _explain(lines: list[str]) -> str:
    """A reason from git's stderr: the line that names the cause (ssh prints it before git's generic
    'Could not read from remote repository ... and the repository exists.'), explained."""
    text = " ".join(lines).lower()
    if "host key verification failed" in text or "remote host identification has changed" in text:
        return ("the SSH host key is not the one in the Secret's known_hosts (Host key verification failed); "
                "add the server's key to known_hosts")
    if "permission denied (publickey" in text:
        return "the repository refused the credentials (Permission denied (publickey)): check the Secret's identity"
    fatal = [x for x in lines if x.lower().startswith(("fatal:", "error:", "ssh:"))]
    line = fatal[0] if fatal else lines[-1]
    low = line.lower()
    if "couldn't find remote ref" in low or "not our ref" in low or "unadvertised object" in low:
        return f"ref not found in the repository ({line})"
    if "redirect" in low or any(f"returned error: {code}" in low for code in ("301", "302", "303", "307", "308")):
        return f"the repository answered with a redirect, which is not followed: use the final URL ({line})"
    if "could not resolve host" in low or "failed to connect" in low or "connection refused" in low:
        return f"repository unreachable ({line})"
    if ("authentication failed" in low or "could not read username" in low
            or any(f"returned error: {code}" in low for code in ("401", "403"))):
        return f"the repository refused the credentials ({line})"
    return line


class _Killer:
    """Kills a long-lived git process at the deadline (reads from its pipe then end)."""

    def __init__(self, proc: subprocess.Popen, deadline: Deadline) -> None:
        self.fired = False
        self.proc = proc
        self.timer = threading.Timer(max(0.0, deadline.at - deadline.clock()), self._kill)
        self.timer.daemon = True
        self.timer.start()

    def _kill(self) -> None:
        self.fired = True
        _kill_group(self.proc)

    def stop(self) -> None:
        self.timer.cancel()


def _listing(cache: Path, revision: str, env: dict[str, str], deadline: Deadline) -> Iterator[tuple[bytes, bytes, str, str]]:
    """(mode, type, sha, path) of every entry of the revision's tree, streamed from ``git ls-tree``."""
    proc = subprocess.Popen(["git", "ls-tree", "-r", "-z", "--end-of-options", revision], cwd=cache, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    assert proc.stdout is not None
    killer = _Killer(proc, deadline)
    try:
        pending = b""
        while chunk := proc.stdout.read(65536):
            pending += chunk
            *entries, pending = pending.split(b"\0")
            for entry in entries:
                meta, path_b = entry.split(b"\t", 1)
                mode, kind, sha = meta.split()
                yield mode, kind, sha.decode(), path_b.decode("utf-8", "replace")
        code = proc.wait()
    finally:
        killer.stop()
        _kill_group(proc)
        proc.wait()
    if killer.fired:
        raise deadline.error("git ls-tree")
    if code != 0:
        raise FetchError(f"git ls-tree of {revision[:12]} failed ({code})")


def _present_sizes(cache: Path, env: dict[str, str], deadline: Deadline) -> dict[str, int]:
    """sha -> size of every blob the cache holds (a blob over the fetch filter's limit is absent)."""
    out = _git(["cat-file", "--batch-check=%(objecttype) %(objectname) %(objectsize)", "--batch-all-objects",
                "--unordered"], cache, env, deadline)
    sizes = {}
    for line in out.splitlines():
        kind, sha, size = line.split()
        if kind == b"blob":
            sizes[sha.decode()] = int(size)
    return sizes


def read_blobs(cache: Path, blobs: list[tuple[str, str, int]], env: dict[str, str],
               deadline: Deadline) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of each (path, sha, size), one blob at a time from one ``git cat-file --batch``."""
    if not blobs:
        return
    proc = subprocess.Popen(["git", "cat-file", "--batch"], cwd=cache, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None
    killer = _Killer(proc, deadline)
    try:
        for path, sha, size in blobs:
            proc.stdin.write(sha.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline(256).split()
            if len(header) != 3 or header[1] != b"blob" or int(header[2]) != size:
                raise FetchError(f"git cat-file answered {b' '.join(header)[:120]!r} for {path}")
            data = _read_exactly(proc.stdout, size)
            if len(data) != size or proc.stdout.read(1) != b"\n":
                raise FetchError(f"git cat-file stopped in the middle of {path}")
            yield path, data
    except (BrokenPipeError, ValueError, FetchError):
        if killer.fired:
            raise deadline.error("reading the repository's files") from None
        raise
    finally:
        killer.stop()
        _kill_group(proc)
        proc.wait()


def _read_exactly(stream, size: int) -> bytes:
    parts, left = [], size
    while left:
        part = stream.read(min(left, 1 << 20))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def fetch_git(url: str, ref: str, paths: list[str], cache: Path, creds: GitCredentials | None = None,
              known_revision: str | None = None, *, policy: EgressPolicy | None = None,
              limits: FetchLimits | None = None, raw_paths: frozenset[str] = frozenset()) -> Fetched:
    """``raw_paths``: files kept as they are in ``Fetched.raw``, not indexed (a golden set)."""
    policy, limits = policy or EgressPolicy(), limits or FetchLimits()
    deadline = Deadline(limits.deadline_s)
    spec = compile_paths(paths)
    where = remote(url)
    try:
        to = pin(where.host, where.port, policy)
    except EgressDenied as exc:
        raise FetchError(f"{url}: refused by the egress policy: {exc}") from None
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ragengine-git-") as scratch_dir:
        scratch = Path(scratch_dir)
        env = _git_env(url, where, to, creds, scratch)
        if not (cache / "HEAD").exists():
            _git(["init", "--bare", "--quiet", str(cache)], scratch, env, deadline)
        _git(["fetch", "--quiet", "--depth", "1", "--no-tags", f"--filter=blob:limit={limits.max_file_bytes}",
              "--end-of-options", url, ref], cache, env, deadline)
        revision = _git(["rev-parse", "--verify", "FETCH_HEAD^{commit}"], cache, env, deadline).decode().strip()
        if revision == known_revision:
            return Fetched(revision, unchanged=True)
        out = Fetched(revision, raw_paths=raw_paths)
        sizes = _present_sizes(cache, env, deadline)
        blobs: list[tuple[str, str, int]] = []
        total = 0
        for mode, kind, sha, path in _listing(cache, revision, env, deadline):
            if kind != b"blob" or not spec.match_file(path):
                continue
            size = sizes.get(sha)
            if mode == b"120000":
                out.skipped[path] = "symbolic link"
            elif size is None or size > limits.max_file_bytes:
                out.skipped[path] = (too_large(size, limits.max_file_bytes) if size is not None else
                                     f"too large: over {limits.max_file_bytes} bytes (not downloaded)")
            else:
                blobs.append((path, sha, size))
                total += size
                if len(blobs) > limits.max_files:
                    raise FetchError(f"more than {limits.max_files} files of {revision[:12]} match paths "
                                     f"(the source's maxFiles): narrow git.paths or raise maxFiles")
                if total > limits.max_bytes:
                    raise FetchError(f"the files of {revision[:12]} that match paths hold more than "
                                     f"{limits.max_bytes} bytes (the source's maxSize): narrow git.paths or raise maxSize")
        if not blobs and not out.skipped:
            raise FetchError(f"no file of {revision[:12]} matches paths {paths}")
        for path, data in read_blobs(cache, blobs, env, deadline):
            extract(path, data, out, limits=limits)
        return out

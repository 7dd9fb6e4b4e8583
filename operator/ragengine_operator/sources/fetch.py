"""Readers of the three source kinds; each returns the files of one revision, already extracted.

- git: the ``git`` CLI, one shallow fetch of the ref into a cache folder per source; the revision is
  the commit id. HTTPS credentials travel in ``GIT_CONFIG_*`` environment variables (an
  ``http.extraHeader``), never on a command line or in a URL; SSH uses the Secret's key and
  known_hosts (strict host checking). A commit that equals the last synced one is not read at all.
- http: httpx, one document per URL, ``If-None-Match`` / ``If-Modified-Since`` from the last sync; the
  revision is a digest of every URL's ETag (or Last-Modified, or content hash).
- configMap: the object's data (read by the caller through the Kubernetes API); the revision is its
  resourceVersion.

Files that are binary, unknown, not UTF-8, too large or empty are skipped with a reason (counted in
the status), never fatal. Failures that make the whole source unreadable raise ``FetchError`` with a
message fit for the status and an Event.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pathspec

from ragengine.filetypes import Extracted, to_document
from ragengine_operator.sources.plan import SourceFile

MAX_FILE_BYTES = 20 * 1024 * 1024
MAX_CHARS = 5_000_000
GIT_TIMEOUT_S = 300


class FetchError(Exception):
    """The source could not be read at all (unreachable, refused credentials, unknown ref)."""


@dataclass
class Fetched:
    revision: str
    files: list[SourceFile] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # path -> reason
    unchanged: bool = False  # the revision is the one already synced: nothing was read
    kept: list[str] = field(default_factory=list)  # paths not read because unchanged (HTTP 304): keep them
    validators: dict[str, dict] = field(default_factory=dict)  # http: url -> {etag, last_modified}


def extract(path: str, data: bytes, into: Fetched, url: str | None = None, typed_as: str | None = None) -> None:
    """Add the file's document to ``into`` (or its reason to be skipped); ``typed_as``: a name whose
    suffix tells the file type when ``path`` has none (a URL served as text/html)."""
    if len(data) > MAX_FILE_BYTES:
        into.skipped[path] = f"too large: {len(data)} bytes (the limit is {MAX_FILE_BYTES})"
        return
    found = to_document(typed_as or path, data, max_chars=MAX_CHARS)
    if isinstance(found, Extracted):
        into.files.append(SourceFile(path, found.text, found.metadata, url))
    else:
        into.skipped[path] = found.reason


# -- git -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GitCredentials:
    username: str | None = None
    password: str | None = None  # or a token
    identity: str | None = None  # SSH private key
    known_hosts: str | None = None


def _git_env(creds: GitCredentials | None, scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true", GIT_CONFIG_NOSYSTEM="1", HOME=str(scratch))
    pairs: list[tuple[str, str]] = []
    if creds and creds.password is not None:
        token = base64.b64encode(f"{creds.username or 'git'}:{creds.password}".encode()).decode()
        pairs.append(("http.extraHeader", f"Authorization: Basic {token}"))
    if creds and creds.identity is not None:
        key = scratch / "identity"
        key.write_text(creds.identity if creds.identity.endswith("\n") else creds.identity + "\n")
        key.chmod(0o600)
        hosts = scratch / "known_hosts"
        hosts.write_text(creds.known_hosts or "")
        env["GIT_SSH_COMMAND"] = (f"ssh -i {key} -o IdentitiesOnly=yes -o UserKnownHostsFile={hosts} "
                                  "-o StrictHostKeyChecking=yes")
    env["GIT_CONFIG_COUNT"] = str(len(pairs))
    for i, (k, v) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = k, v
    return env


def _git(args: list[str], cwd: Path, env: dict[str, str]) -> bytes:
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, timeout=GIT_TIMEOUT_S)
    if proc.returncode != 0:
        lines = [x.strip() for x in proc.stderr.decode("utf-8", "replace").splitlines() if x.strip()]
        raise FetchError(_explain(lines) if lines else f"git {args[0]} failed ({proc.returncode})")
    return proc.stdout


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
    if "could not resolve host" in low or "failed to connect" in low or "connection refused" in low:
        return f"repository unreachable ({line})"
    if ("authentication failed" in low or "could not read username" in low
            or any(f"returned error: {code}" in low for code in ("401", "403"))):
        return f"the repository refused the credentials ({line})"
    return line


def fetch_git(url: str, ref: str, paths: list[str], cache: Path, creds: GitCredentials | None = None,
              known_revision: str | None = None) -> Fetched:
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ragengine-git-") as scratch_dir:
        scratch = Path(scratch_dir)
        env = _git_env(creds, scratch)
        if not (cache / "HEAD").exists():
            _git(["init", "--bare", "--quiet", str(cache)], scratch, env)
        _git(["fetch", "--quiet", "--depth", "1", "--no-tags", url, ref], cache, env)
        revision = _git(["rev-parse", "FETCH_HEAD^{commit}"], cache, env).decode().strip()
        if revision == known_revision:
            return Fetched(revision, unchanged=True)
        listing = _git(["ls-tree", "-r", "-z", "--long", revision], cache, env)
    spec = pathspec.PathSpec.from_lines("gitignore", paths or ["**"])
    out = Fetched(revision)
    blobs: list[tuple[str, str]] = []
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, path_b = entry.split(b"\t", 1)
        mode, kind, sha, size = meta.split()
        path = path_b.decode("utf-8", "replace")
        if kind != b"blob" or not spec.match_file(path):
            continue
        if mode == b"120000":
            out.skipped[path] = "symbolic link"
        elif size != b"-" and int(size) > MAX_FILE_BYTES:
            out.skipped[path] = f"too large: {int(size)} bytes (the limit is {MAX_FILE_BYTES})"
        else:
            blobs.append((path, sha.decode()))
    if not blobs and not out.skipped:
        raise FetchError(f"no file of {revision[:12]} matches paths {paths}")
    for (path, _), (_, data) in zip(blobs, _read_blobs(cache, [sha for _, sha in blobs]), strict=True):
        extract(path, data, out)
    return out


def _read_blobs(repo: Path, shas: list[str]) -> list[tuple[str, bytes]]:
    """Every blob in one ``git cat-file --batch`` process, in order."""
    if not shas:
        return []
    proc = subprocess.run(["git", "cat-file", "--batch"], cwd=repo, input=("\n".join(shas) + "\n").encode(),
                          capture_output=True, timeout=GIT_TIMEOUT_S, check=True)
    out, data, pos = [], proc.stdout, 0
    for sha in shas:
        nl = data.index(b"\n", pos)
        header = data[pos:nl].split()
        size = int(header[2])
        out.append((sha, data[nl + 1: nl + 1 + size]))
        pos = nl + 1 + size + 1
    return out


# -- http ------------------------------------------------------------------------------------------
def fetch_http(urls: list[str], previous: dict[str, dict], token: str | None = None, timeout: float = 60.0,
               last_revision: str | None = None) -> Fetched:
    """Fetch each URL (conditionally); a URL answering 304 keeps its last content hash in the revision."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    out = Fetched("")
    all_unchanged = True
    with httpx.Client(timeout=timeout, follow_redirects=True, headers=headers) as client:
        for url in urls:
            seen = previous.get(url, {})
            cond = {}
            if seen.get("etag"):
                cond["If-None-Match"] = seen["etag"]
            if seen.get("last_modified"):
                cond["If-Modified-Since"] = seen["last_modified"]
            try:
                resp = client.get(url, headers=cond)
            except httpx.HTTPError as exc:
                raise FetchError(f"{url} unreachable ({exc})") from exc
            if resp.status_code == 304:
                out.validators[url] = seen
                out.kept.append(url)
                continue
            if resp.status_code in (401, 403):
                raise FetchError(f"{url} refused the credentials (HTTP {resp.status_code})")
            if resp.status_code >= 400:
                raise FetchError(f"{url} answered HTTP {resp.status_code}")
            all_unchanged = False
            digest = hashlib.sha256(resp.content).hexdigest()
            out.validators[url] = {"etag": resp.headers.get("etag"), "last_modified": resp.headers.get("last-modified"),
                                   "digest": digest}
            extract(url, resp.content, out, url=url, typed_as=_typed_name(url, resp.headers.get("content-type", "")))
    tags = "".join(f"{u}={out.validators[u].get('digest') or out.validators[u].get('etag')}" for u in urls)
    out.revision = "sha256:" + hashlib.sha256(tags.encode()).hexdigest()[:16]
    out.unchanged = all_unchanged and out.revision == last_revision
    return out


def _typed_name(url: str, content_type: str) -> str:
    """A path for a URL whose suffix tells the extractor the type (from the URL, else the content type)."""
    path = httpx.URL(url).path.rstrip("/") or "/index"
    if Path(path).suffix:
        return url
    ctype = content_type.split(";")[0].strip().lower()
    suffix = {"text/html": ".html", "application/pdf": ".pdf", "text/markdown": ".md", "text/plain": ".txt"}.get(ctype, "")
    return url + suffix


# -- configMap -------------------------------------------------------------------------------------
def from_configmap(data: dict[str, str] | None, binary_data: dict[str, str] | None, keys: list[str] | None,
                   resource_version: str) -> Fetched:
    out = Fetched(resource_version)
    available = {**{k: v.encode("utf-8") for k, v in (data or {}).items()},
                 **{k: base64.b64decode(v) for k, v in (binary_data or {}).items()}}
    for key in keys or sorted(available):
        if key not in available:
            out.skipped[key] = "no such key in the ConfigMap"
            continue
        extract(key, available[key], out)
    return out

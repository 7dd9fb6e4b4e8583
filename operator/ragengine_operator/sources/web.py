"""HTTP sources: one document per URL, read under the egress policy, in bounded memory and time.

The reading itself is net/http.py's (``pinned_get``: every URL and redirect hop resolved, checked and
pinned, one deadline over every socket operation; ``read_body``: decoded here, cut at the per-file cap, so a
gzip bomb costs the cap). This module decides what a body is and what the revision is:

- ``typed_name``: only text and known document types are indexed. The content type decides (text/*,
  HTML, Markdown, PDF, ...), else the URL's file suffix; a body with neither (JSON from an API or a
  metadata service, say) is skipped with the reason.
- ``fetch_http``: conditional GETs (``If-None-Match`` / ``If-Modified-Since`` from the last sync); the
  revision is a digest of every URL's content hash (or ETag). The whole fetch runs under one deadline,
  so a server that trickles a byte a second cannot hold a worker.
"""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath

import httpx

from ragengine_operator.net.egress import EgressPolicy
from ragengine_operator.net.http import Deadline, FetchError, TooLarge, pinned_get, read_body
from ragengine_operator.sources.fetched import Fetched, FetchLimits, extract

DOCUMENT_TYPES = {
    "text/html": ".html", "application/xhtml+xml": ".html", "text/markdown": ".md", "text/x-markdown": ".md",
    "text/x-rst": ".rst", "text/csv": ".csv", "application/pdf": ".pdf",
}


def typed_name(url: str, content_type: str) -> str | None:
    """A name whose suffix tells the extractor the type: the content type's when it is a document type,
    the URL's own suffix for text/* (``.py`` served as text/plain stays code) or an untyped body; None
    when neither says it is a document."""
    media = content_type.split(";")[0].strip().lower()
    path = httpx.URL(url).path.rstrip("/") or "/index"
    suffix = PurePosixPath(path).suffix.lower()
    wanted = DOCUMENT_TYPES.get(media)
    if wanted:
        return path if suffix == wanted else path + wanted
    if media.startswith("text/"):
        return path if suffix else path + ".txt"
    if suffix:
        return path
    return None


def _refused_type(content_type: str) -> str:
    media = content_type.split(";")[0].strip() or "none"
    return (f"content type {media} is not text or a document type, and the URL has no file suffix "
            "(only text, HTML, Markdown, reStructuredText, CSV and PDF are indexed)")


def fetch_http(urls: list[str], previous: dict[str, dict], token: str | None = None, *,
               policy: EgressPolicy | None = None, limits: FetchLimits | None = None,
               last_revision: str | None = None, raw_paths: frozenset[str] = frozenset()) -> Fetched:
    """Fetch each URL (conditionally); a URL answering 304 keeps its last content hash in the revision.
    ``raw_paths``: URLs kept as they are in ``Fetched.raw``, not indexed (a golden set)."""
    policy, limits = policy or EgressPolicy(), limits or FetchLimits()
    deadline = Deadline(limits.deadline_s)
    out = Fetched("", raw_paths=raw_paths)
    all_unchanged = True
    total = 0
    for url in urls:
        seen = previous.get(url, {})
        cond = {}
        if seen.get("etag"):
            cond["If-None-Match"] = seen["etag"]
        if seen.get("last_modified"):
            cond["If-Modified-Since"] = seen["last_modified"]
        with pinned_get(url, policy, deadline, headers=cond, token=token,
                        max_redirects=limits.max_redirects) as (final, resp):
            if resp.status_code == 304:
                out.validators[url] = seen
                out.kept.append(url)
                continue
            if resp.status_code in (401, 403):
                raise FetchError(f"{url} refused the credentials (HTTP {resp.status_code})")
            if resp.status_code >= 300:
                raise FetchError(f"{url} answered HTTP {resp.status_code}")
            all_unchanged = False
            validators = {"etag": resp.headers.get("etag"), "last_modified": resp.headers.get("last-modified"),
                          "digest": None}
            out.validators[url] = validators
            ctype = resp.headers.get("content-type", "")
            typed = typed_name(final, ctype)
            if typed is None:
                out.skipped[url] = _refused_type(ctype)
                continue
            try:
                data = read_body(resp, limits.max_file_bytes, deadline)
            except TooLarge:
                out.skipped[url] = f"too large: more than {limits.max_file_bytes} bytes (the limit, counted decoded)"
                continue
        total += len(data)
        if total > limits.max_bytes:
            raise FetchError(f"the URLs hold more than {limits.max_bytes} bytes (the source's maxSize)")
        validators["digest"] = hashlib.sha256(data).hexdigest()
        extract(url, data, out, url=url, typed_as=typed, limits=limits)
        del data
    tags = "".join(f"{u}={out.validators[u].get('digest') or out.validators[u].get('etag')}" for u in urls)
    out.revision = "sha256:" + hashlib.sha256(tags.encode()).hexdigest()[:16]
    out.unchanged = all_unchanged and out.revision == last_revision
    return out

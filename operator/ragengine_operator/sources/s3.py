"""S3 sources: the objects of a bucket under a prefix, read under the egress policy, synced by ETag.

- ``Bucket``: one httpx client of the bucket's endpoint over net/transport.py's ``BoundedTransport``, as
  every call to a server a tenant names: each connection to the address the egress policy checked, one
  deadline per call (and the fetch's over them all), each answer decoded and capped there (a listing page,
  an object at the per-file limit), no redirect followed. Each request is signed with SigV4 (httpx-auth's
  ``AWS4Auth``, an httpx auth flow that runs before the transport) when there are credentials, unsigned
  otherwise (a public bucket).
- ``Bucket.listing``: ListObjectsV2, paged (1000 keys a page, as the servers cap it), so a bucket of a
  million keys is read a page at a time; the matching objects are counted and sized from the listing,
  against the source's ``maxFiles`` / ``maxSize``, before any object is read.
- ``fetch_s3``: the revision is a digest of the matching keys and their ETags (the same listing: nothing
  read). Objects whose ETag is the one the index holds (the ``etag`` of their document's metadata) are
  kept without being read; the others are read, one at a time, each cut at the per-file limit. An object
  replaced between the listing and its read is read whole at its new version (a GET is one version of
  one object, never half of two) and its document records the ETag it was read at, so the next sync
  compares against what is indexed; an object deleted meanwhile is skipped, and deleted next time.
- Errors name their cause: refused credentials (``InvalidAccessKeyId``, ``SignatureDoesNotMatch``,
  ``AccessDenied``), a missing bucket, a clock the server refuses (``RequestTimeTooSkewed``), a bucket
  in another region.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from defusedxml import ElementTree
from httpx_auth import AWS4Auth

from ragengine.filetypes import format_of
from ragengine_operator.net.egress import EgressPolicy
from ragengine_operator.net.http import TooLarge
from ragengine_operator.net.transport import MAX_BYTES, BoundedTransport, EgressRefused, ResponseTooLarge
from ragengine_operator.sources.fetched import (
    Deadline,
    Fetched,
    FetchError,
    FetchLimits,
    extract,
    refused_format,
    too_large,
)
from ragengine_operator.sources.git import compile_paths
from ragengine_operator.spec.sources import S3Source

PAGE = 1000
MAX_LISTING_BYTES = 16 * 1024 * 1024  # one page of the listing (1000 keys of 1 KiB each fit)
MAX_ERROR_BYTES = 64 * 1024
CALL_TIMEOUT_S = 120.0  # one call: a listing page, or an object at the per-file limit (20 MiB) at 200 KB/s
ETAG_KEY = "etag"
# AWS's codes for a key, a signature or a token the server refuses (versitygw says XAdminUserNotFound for an
# unknown key, with a 404)
REFUSED_CREDENTIALS = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken",
                       "ExpiredToken", "InvalidSecurity", "AllAccessDisabled", "AccountProblem", "XAdminUserNotFound")


@dataclass(frozen=True)
class S3Credentials:
    access_key_id: str
    secret_access_key: str
    session_token: str | None = None

    @classmethod
    def from_secret(cls, secret: Mapping[str, str] | None) -> S3Credentials | None:
        """The Secret's ``accessKeyId`` / ``secretAccessKey`` (/ ``sessionToken``); None without a Secret."""
        if not secret:
            return None
        key, password = (secret.get("accessKeyId") or "").strip(), (secret.get("secretAccessKey") or "").strip()
        if not key or not password:
            raise FetchError("the S3 Secret needs the keys accessKeyId and secretAccessKey")
        return cls(key, password, (secret.get("sessionToken") or "").strip() or None)


@dataclass(frozen=True)
class Listed:
    key: str
    path: str  # the key relative to the prefix: the document's path
    etag: str
    size: int
    last_modified: str


def bucket_base(spec: S3Source) -> httpx.URL:
    """The bucket's URL: ``<endpoint>/<bucket>`` (path style) or ``<scheme>://<bucket>.<host>`` (virtual-hosted)."""
    endpoint = spec.endpoint or f"https://s3.{spec.region}.amazonaws.com"
    path_style = spec.path_style if spec.path_style is not None else spec.endpoint is not None
    if path_style:
        return httpx.URL(f"{endpoint}/{spec.bucket}")
    parts = urlsplit(endpoint)
    return httpx.URL(f"{parts.scheme}://{spec.bucket}.{parts.netloc}")


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child(node: Any, name: str) -> str | None:
    for sub in node:
        if _local(sub.tag) == name:
            return sub.text or ""
    return None


def indexable(path: str, limits: FetchLimits) -> str | None:
    """The reason a key is skipped by its name alone (nothing downloaded), or None when it may be a document."""
    kind = format_of(path)
    if kind is None:
        return f"unsupported file type '{PurePosixPath(path).suffix.lower()}'"
    return refused_format(kind, limits)


class Bucket:
    def __init__(self, spec: S3Source, credentials: S3Credentials | None, policy: EgressPolicy,
                 deadline: Deadline, max_bytes: int) -> None:
        self.spec, self.deadline = spec, deadline
        self.base = bucket_base(spec)
        self.where = f"bucket {spec.bucket} at {spec.endpoint or 'AWS S3 (' + spec.region + ')'}"
        auth = None
        if credentials is not None:
            auth = AWS4Auth(credentials.access_key_id, credentials.secret_access_key, spec.region, "s3",
                            security_token=credentials.session_token)
        transport = BoundedTransport(CALL_TIMEOUT_S, max(max_bytes, MAX_LISTING_BYTES), policy, deadline)
        self.http = httpx.Client(transport=transport, auth=auth, follow_redirects=False, trust_env=False)

    def __enter__(self) -> Bucket:
        return self

    def __exit__(self, *_: object) -> None:
        self.http.close()

    def _fetch_error(self, exc: httpx.HTTPError) -> FetchError:
        if isinstance(exc, EgressRefused):
            return FetchError(str(exc))
        if isinstance(exc, httpx.TimeoutException) and self.deadline.passed():
            return self.deadline.error(f"reading {self.where}")
        return FetchError(f"{self.where} unreachable ({exc})")

    def _get(self, url: httpx.URL, limit: int, params: dict[str, str] | None = None) -> httpx.Response:
        """The response, body unread (``close`` it), its body capped at ``limit``; FetchError when the server
        cannot be reached (or the egress policy refuses it)."""
        try:
            return self.http.send(self.http.build_request("GET", url, params=params, extensions={MAX_BYTES: limit}),
                                  stream=True)
        except httpx.HTTPError as exc:
            raise self._fetch_error(exc) from None

    def _body(self, resp: httpx.Response, limit: int) -> bytes:
        """The (decoded) body; TooLarge past ``limit``, FetchError for a broken stream or the deadline."""
        out = bytearray()
        try:
            for chunk in resp.iter_raw():  # decoded by the transport
                out += chunk
                if len(out) > limit:
                    raise TooLarge(limit)
        except ResponseTooLarge:
            raise TooLarge(limit) from None
        except httpx.HTTPError as exc:
            raise self._fetch_error(exc) from None
        finally:
            resp.close()
        return bytes(out)

    def _failure(self, resp: httpx.Response, what: str) -> FetchError:
        """The reason an S3 request failed, from its error document (Code, Message)."""
        try:
            body = self._body(resp, MAX_ERROR_BYTES)
            root = ElementTree.fromstring(body) if body.strip() else None
        except (TooLarge, FetchError, ElementTree.ParseError, ValueError):
            root = None
        code = (_child(root, "Code") if root is not None else None) or ""
        message = ((_child(root, "Message") if root is not None else None) or "").strip()[:300]
        detail = f"{code}: {message}" if message else code or f"HTTP {resp.status_code}"
        if code in REFUSED_CREDENTIALS or (not code and resp.status_code in (401, 403)):
            return FetchError(f"{self.where} refused the credentials ({detail}): check the Secret's accessKeyId "
                              "and secretAccessKey, and the key's permissions (s3:ListBucket, s3:GetObject)")
        if code == "RequestTimeTooSkewed":
            return FetchError(f"{self.where} refused the request's time ({detail}): the sync's clock and the "
                              "server's differ by more than the server allows (15 minutes on AWS); fix the clocks (NTP)")
        if code == "NoSuchBucket" or (not code and resp.status_code == 404 and what == "listing"):
            return FetchError(f"{self.where}: no such bucket ({detail})")
        if code in ("PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException") or \
                resp.status_code in (301, 307):
            endpoint = (_child(root, "Endpoint") if root is not None else None) or resp.headers.get("location", "")
            return FetchError(f"{self.where} is in another region or needs another endpoint ({detail}"
                              f"{'; it names ' + endpoint if endpoint else ''}): set s3.region or s3.endpoint")
        return FetchError(f"{self.where}: {what} answered HTTP {resp.status_code} ({detail})")

    def listing(self, prefix: str) -> Iterator[Listed]:
        """Every object under ``prefix``, a page (ListObjectsV2) at a time."""
        token: str | None = None
        while True:
            params = {"list-type": "2", "max-keys": str(PAGE), "prefix": prefix}
            if token:
                params["continuation-token"] = token
            resp = self._get(self.base.copy_with(path=(self.base.path.rstrip("/") or "") + "/"), MAX_LISTING_BYTES,
                             params)
            if resp.status_code != 200:
                raise self._failure(resp, "listing")
            try:
                root = ElementTree.fromstring(self._body(resp, MAX_LISTING_BYTES))
            except TooLarge:
                raise FetchError(f"{self.where}: a listing page over {MAX_LISTING_BYTES} bytes") from None
            except (ElementTree.ParseError, ValueError) as exc:
                raise FetchError(f"{self.where}: the listing is not S3's XML ({exc})") from None
            for node in root:
                if _local(node.tag) != "Contents":
                    continue
                key = _child(node, "Key") or ""
                yield Listed(key, key[len(prefix):], (_child(node, "ETag") or "").strip('"'),
                             int(_child(node, "Size") or 0), _child(node, "LastModified") or "")
            token = _child(root, "NextContinuationToken")
            if (_child(root, "IsTruncated") or "").lower() != "true" or not token:
                return

    def read(self, key: str, limit: int) -> tuple[bytes, str, str] | None:
        """(the object's bytes, its ETag, its Last-Modified), None when it is gone; TooLarge over ``limit``."""
        resp = self._get(self.base.copy_with(raw_path=(self.base.raw_path.rstrip(b"/") + b"/"
                                                       + quote(key, safe="/~").encode("ascii"))), limit)
        if resp.status_code == 404:
            resp.close()
            return None
        if resp.status_code != 200:
            raise self._failure(resp, f"GET {key}")
        etag, modified = resp.headers.get("etag", "").strip('"'), resp.headers.get("last-modified", "")
        return self._body(resp, limit), etag, modified


def revision_of(objects: list[Listed]) -> str:
    blob = "\n".join(f"{o.path}\0{o.etag}" for o in sorted(objects, key=lambda o: o.path))
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def fetch_s3(spec: S3Source, credentials: S3Credentials | None = None, *,
             held: Callable[[], Mapping[str, Mapping[str, Any]]] | None = None, known_revision: str | None = None,
             policy: EgressPolicy | None = None, limits: FetchLimits | None = None,
             raw_paths: frozenset[str] = frozenset()) -> Fetched:
    """``held``: the metadata of the documents the index holds for this source (asked only when the listing
    moved): an object whose ETag is its document's is kept without being read. ``raw_paths``: objects (paths
    relative to the prefix) kept as they are in ``Fetched.raw``, not indexed (a golden set)."""
    policy, limits = policy or EgressPolicy(), limits or FetchLimits()
    deadline = Deadline(limits.deadline_s)
    globs = compile_paths(spec.paths)
    matched: list[Listed] = []
    skipped: dict[str, str] = {}
    total = 0
    with Bucket(spec, credentials, policy, deadline, limits.max_file_bytes) as bucket:
        for obj in bucket.listing(spec.prefix):
            if not obj.path or obj.path.endswith("/") or not globs.match_file(obj.path):
                continue  # the prefix itself, folder markers, keys outside s3.paths
            why = (None if obj.path in raw_paths else indexable(obj.path, limits)) or (
                too_large(obj.size, limits.max_file_bytes) if obj.size > limits.max_file_bytes else None)
            if why:
                skipped[obj.path] = why
                continue
            matched.append(obj)
            total += obj.size
            if len(matched) > limits.max_files:
                raise FetchError(f"more than {limits.max_files} objects of {bucket.where} match s3.paths (the "
                                 "source's maxFiles): narrow s3.prefix or s3.paths, or raise maxFiles")
            if total > limits.max_bytes:
                raise FetchError(f"the objects of {bucket.where} that match s3.paths hold more than {limits.max_bytes} "
                                 "bytes (the source's maxSize): narrow s3.prefix or s3.paths, or raise maxSize")
        if not matched and not skipped:
            raise FetchError(f"no object of {bucket.where} under prefix {spec.prefix!r} matches s3.paths {spec.paths}")
        revision = revision_of(matched)
        if revision == known_revision:
            return Fetched(revision, unchanged=True)
        out = Fetched(revision, skipped=skipped, raw_paths=raw_paths)
        indexed = {str(m.get("path")): m for m in (held() if held is not None else {}).values()}
        for obj in matched:
            if (indexed.get(obj.path) or {}).get(ETAG_KEY) == obj.etag:
                out.kept.append(obj.path)
                continue
            try:
                got = bucket.read(obj.key, limits.max_file_bytes)
            except TooLarge:
                out.skipped[obj.path] = f"too large: more than {limits.max_file_bytes} bytes (the limit)"
                continue
            if got is None:
                out.skipped[obj.path] = "deleted during the sync"
                continue
            data, etag, modified = got
            before = len(out.files)
            extract(obj.path, data, out, limits=limits)
            if len(out.files) > before:  # the object's version, so the next sync compares against what was read
                f = out.files[-1]
                out.files[-1] = replace(f, metadata={**f.metadata, ETAG_KEY: etag or obj.etag,
                                                     "last_modified": modified or obj.last_modified})
    return out

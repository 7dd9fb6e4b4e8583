"""Readers of the three source kinds; each returns the files of one revision, already extracted.

- git (git.py): one shallow fetch of the ref; the revision is the commit id.
- http (web.py): one document per URL, conditional GETs; the revision is a digest of the URLs' contents.
- configMap: the object's data (read by the caller through the Kubernetes API); the revision is its
  resourceVersion.

git and http read under the egress policy (egress.py) and the fetch's limits (fetched.py): hosts the
policy refuses are never contacted, memory holds one file at a time, and the whole fetch has a
deadline. Files that are binary, unknown, not UTF-8, too large, empty or unreadable are skipped with a
reason (counted in the status), never fatal. Failures that make the whole source unreadable raise
``FetchError`` with a message fit for the status and an Event.
"""

from __future__ import annotations

import base64

from ragengine_operator.sources.fetched import MAX_FILE_BYTES, Fetched, FetchError, FetchLimits, extract
from ragengine_operator.sources.git import GitCredentials, fetch_git
from ragengine_operator.sources.web import fetch_http

__all__ = ["MAX_FILE_BYTES", "FetchError", "FetchLimits", "Fetched", "GitCredentials", "extract", "fetch_git",
           "fetch_http", "from_configmap"]


def from_configmap(data: dict[str, str] | None, binary_data: dict[str, str] | None, keys: list[str] | None,
                   resource_version: str, limits: FetchLimits | None = None) -> Fetched:
    out = Fetched(resource_version)
    available = {**{k: v.encode("utf-8") for k, v in (data or {}).items()},
                 **{k: base64.b64decode(v) for k, v in (binary_data or {}).items()}}
    for key in keys or sorted(available):
        if key not in available:
            out.skipped[key] = "no such key in the ConfigMap"
            continue
        extract(key, available[key], out, limits=limits)
    return out

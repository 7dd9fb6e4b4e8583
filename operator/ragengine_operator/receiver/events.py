"""What a verified webhook asks of a source: sync now, or nothing (and why). Pure.

- GitHub (``X-GitHub-Event``) and GitLab (``X-Gitlab-Event``): a push to the branch or tag the git
  source follows syncs it; a push elsewhere, a ping and other events do not. A source of another kind
  syncs on any push (its documents may be generated from the repository).
- generic: an S3 event notification (``Records[].s3``, as AWS, MinIO and Ceph send it, relayed signed)
  syncs an S3 source when one of its records names the source's bucket and a key under its prefix; any
  other signed body syncs the source (a CI job that just published documents, say).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ragengine_operator.spec.sources import Source

COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError):
        return None


def _push(source: Source, ref: Any) -> tuple[bool, str]:
    if not isinstance(ref, str) or not ref:
        return False, "the push names no ref"
    if source.git is None:
        return True, f"a push to {ref}"
    wanted = source.git.ref
    if COMMIT.match(wanted):
        return False, f"the source follows the fixed commit {wanted[:12]}: a push does not move it"
    if ref in (wanted, f"refs/heads/{wanted}", f"refs/tags/{wanted}"):
        return True, f"a push to {ref}"
    return False, f"a push to {ref}; the source follows {wanted}"


def _s3_event(source: Source, records: list) -> tuple[bool, str]:
    if source.s3 is None:
        return True, "an S3 event notification"
    for record in records:
        s3 = (record or {}).get("s3") if isinstance(record, dict) else None
        if not isinstance(s3, dict):
            continue
        bucket = (s3.get("bucket") or {}).get("name")
        key = str((s3.get("object") or {}).get("key") or "")
        if bucket == source.s3.bucket and key.startswith(source.s3.prefix):
            return True, f"an S3 event for {bucket}/{key}"
    return False, f"no record of the event names bucket {source.s3.bucket} under prefix {source.s3.prefix!r}"


def wants_sync(source: Source, kind: str, headers: dict[str, str], body: bytes) -> tuple[bool, str]:
    """(sync the source now?, why) for a request already verified; ``headers``: lower-case names."""
    payload = _json(body)
    if kind == "github":
        event = headers.get("x-github-event", "")
        if event == "ping":
            return False, "ping: the webhook reaches the receiver and its signature holds"
        if event != "push":
            return False, f"GitHub {event or 'unnamed'} events do not sync (push does)"
        return _push(source, (payload or {}).get("ref") if isinstance(payload, dict) else None)
    if kind == "gitlab":
        event = headers.get("x-gitlab-event", "")
        if event not in ("Push Hook", "Tag Push Hook"):
            return False, f"GitLab {event or 'unnamed'} events do not sync (Push Hook and Tag Push Hook do)"
        return _push(source, (payload or {}).get("ref") if isinstance(payload, dict) else None)
    if isinstance(payload, dict) and isinstance(payload.get("Records"), list):
        return _s3_event(source, payload["Records"])
    return True, "a signed request"

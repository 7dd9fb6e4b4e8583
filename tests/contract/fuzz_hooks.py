"""Schemathesis hooks for ``run_fuzz`` (loaded through ``SCHEMATHESIS_HOOKS``; ``RAGENGINE_FUZZ_STATE`` names the
``FuzzState`` file).

- Bodies for the media types it cannot make by itself: ``POST /indexes/{name}/import`` takes an export file
  (``application/gzip``): random bytes, gzip-compressed random bytes and a truncated gzip stream, each of
  which must be refused with a 4xx, never a 5xx.
- ``before_call``: each request goes with the key of a principal drawn at random (a generator seeded with
  the run's seed), now and then with no key or a wrong one; in the stateful phase too, so what one
  principal created is tried by the others. An admin may use anyone's upload: attaching one principal's
  file to another's session or vector store shares it, by design, so a request that names file ids in its
  body never goes with an admin's key (the others' are refused there unless the file is theirs); nor does
  replacing a seeded index (``POST /load/{name}`` may load a copy of another one, an admin's power) or
  deleting one, or a seeded vector store (the markers would be gone for the rest of the run).
- ``no_foreign_data``: a response to a principal that is not an admin never holds another principal's
  marker, and never answers 2xx on another principal's session, upload, stored response or evaluation run
  (seeded, or created during the run: ids of what a ``POST`` created are recorded with their creator).
"""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path
from urllib.parse import urlsplit

import schemathesis
from hypothesis import strategies as st

schemathesis.openapi.media_type("application/gzip", st.one_of(
    st.binary(max_size=512),
    st.binary(max_size=2048).map(gzip.compress),
    st.binary(min_size=1, max_size=2048).map(lambda raw: gzip.compress(raw)[: max(1, len(raw) // 2)]),
))

_STATE = json.loads(Path(os.environ["RAGENGINE_FUZZ_STATE"]).read_text()) if os.environ.get("RAGENGINE_FUZZ_STATE") \
    else {"keys": {}, "markers": {}, "owned": {}, "admins": [], "seed": 0}
KEYS: dict[str, str] = _STATE["keys"]
MARKERS: dict[str, str] = _STATE["markers"]
OWNED: dict[str, str] = dict(_STATE["owned"])
ADMINS = frozenset(_STATE["admins"])
PROTECTED = frozenset(_STATE.get("protected", ()))
_draw = random.Random(_STATE["seed"])
_CHOICES = [*KEYS, *KEYS, *KEYS, *KEYS, "", "wrong-key-0123456789abcdef"]  # each key 4 in 4×n+2 draws
CREATES_OWNED = frozenset({"/v1/sessions", "/v1/files", "/v1/responses"})


def creates_owned(path: str) -> bool:
    """Whether a POST to ``path`` creates something its creator owns (a session, upload, stored response or
    evaluation run: ``owned`` in access/routes.py)."""
    return path in CREATES_OWNED or (path.startswith("/indexes/") and path.endswith("/evaluations"))


@schemathesis.hook
def before_call(context, case, kwargs) -> None:
    if not KEYS:
        return
    key = _draw.choice(_CHOICES)
    body = case.body if isinstance(case.body, dict) else {}
    params = case.path_parameters or {}
    replaces = (case.method.upper() == "DELETE" and len(params) == 1) or case.operation.path == "/load/{index_name}"
    seeded = replaces and bool(set(map(str, params.values())) & PROTECTED)
    if KEYS.get(key) in ADMINS and ("file_id" in body or "file_ids" in body or seeded):
        key = _draw.choice([k for k in KEYS if KEYS[k] not in ADMINS])
    headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    case.headers = headers


def _principal(response) -> str | None:
    auth = response.request.headers.get("Authorization") or ""
    return KEYS.get(auth.removeprefix("Bearer "))


@schemathesis.check
def no_foreign_data(ctx, response, case) -> None:
    """No principal but an admin is ever shown another principal's data (its marker, its owned resources)."""
    name = _principal(response)
    path = urlsplit(response.request.url).path
    ok = 200 <= response.status_code < 300
    if ok and response.request.method == "POST" and creates_owned(path) and name is not None:
        try:
            created = json.loads(response.content).get("id")
        except (ValueError, AttributeError):
            created = None
        if isinstance(created, str):
            OWNED.setdefault(created, name)
    if name is None or name in ADMINS:
        return
    body = response.content.decode("utf-8", "replace")
    for other, marker in MARKERS.items():
        if other != name and marker in body:
            raise AssertionError(f"'{name}' was shown data of '{other}' (its marker {marker}) by "
                                 f"{response.request.method} {path}")
    if ok:
        for part in path.split("/"):
            owner = OWNED.get(part)
            if owner is not None and owner != name:
                raise AssertionError(f"'{name}' got {response.status_code} on '{owner}''s {part} by "
                                     f"{response.request.method} {path}")

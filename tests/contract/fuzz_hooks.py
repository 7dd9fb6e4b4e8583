"""Schemathesis hooks for ``run_fuzz`` (loaded through ``SCHEMATHESIS_HOOKS``): bodies for the media types it
cannot make by itself. ``POST /indexes/{name}/import`` takes an export file (``application/gzip``): the fuzzer
sends random bytes, gzip-compressed random bytes and a truncated gzip stream, each of which must be refused
with a 4xx, never a 5xx."""

from __future__ import annotations

import gzip

import schemathesis
from hypothesis import strategies as st

schemathesis.openapi.media_type("application/gzip", st.one_of(
    st.binary(max_size=512),
    st.binary(max_size=2048).map(gzip.compress),
    st.binary(min_size=1, max_size=2048).map(lambda raw: gzip.compress(raw)[: max(1, len(raw) // 2)]),
))

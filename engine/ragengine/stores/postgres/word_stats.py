"""The keyword leg's knowledge of which words are common, from PostgreSQL's own statistics.

``WordStats.known_common`` gives ``keyword.known_common`` its inputs: a leaf's most common lexemes with the
share of rows holding each (``pg_stats`` of its ``tsvector`` column, re-read once a minute, since only
ANALYZE changes them) and each query word's lexemes (the text search configuration's, remembered per
word). ``forget(leaf)`` drops a leaf's statistics after this process analyzed it.
"""

from __future__ import annotations

import time

from sqlalchemy import text
from sqlalchemy.engine import Connection

from ragengine.stores.postgres.keyword import known_common
from ragengine.stores.postgres.schema import TEXT_SEARCH_CONFIG

TTL_S = 60.0  # how long a leaf's most-common-lexeme statistics are reused
MAX_WORDS = 100_000  # remembered words' lexemes, at most (then forgotten all at once)
FREQUENT = text(
    "SELECT s.most_common_elems::text::text[] AS elems, s.most_common_elem_freqs AS freqs, c.reltuples "
    "FROM pg_stats s JOIN pg_namespace n ON n.nspname = s.schemaname JOIN pg_class c ON "
    "c.relname = s.tablename AND c.relnamespace = n.oid "
    "WHERE s.schemaname = :s AND s.tablename = :t AND s.attname = 'tsv'")
LEXEMES = text(f"SELECT w, array(SELECT lexeme FROM unnest(to_tsvector('{TEXT_SEARCH_CONFIG}', w))) "
               "FROM unnest(CAST(:words AS text[])) AS w")


class WordStats:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._frequent: dict[str, tuple[float, dict[str, float], float]] = {}  # leaf -> (read at, freqs, rows)
        self._lexemes: dict[str, tuple[str, ...]] = {}

    def known_common(self, conn: Connection, leaf: str, words: list[str], listed: int) -> dict[str, int]:
        now = time.monotonic()
        stats = self._frequent.get(leaf)
        if stats is None or now - stats[0] > TTL_S:
            row = conn.execute(FREQUENT, {"s": self.schema, "t": leaf}).first()
            frequent = dict(zip(row.elems, row.freqs, strict=False)) if row is not None and row.elems else {}
            stats = self._frequent[leaf] = (now, frequent, float(row.reltuples) if row is not None else 0.0)
        if not stats[1]:
            return {}  # not analyzed yet: every word is counted
        unknown = [w for w in words if w not in self._lexemes]
        if unknown:
            if len(self._lexemes) > MAX_WORDS:
                self._lexemes.clear()
            self._lexemes.update({w: tuple(lx) for w, lx in conn.execute(LEXEMES, {"words": unknown})})
        return known_common({w: self._lexemes[w] for w in words}, stats[1], stats[2], listed)

    def forget(self, leaf: str) -> None:
        self._frequent.pop(leaf, None)

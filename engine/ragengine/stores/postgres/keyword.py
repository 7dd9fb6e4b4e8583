"""Which chunks the PostgreSQL keyword leg ranks: a bounded candidate set chosen from the query's words.

Pure: words, match counts and match lists in; words and chunk ids out. The store
(``PostgresStore.keyword``) runs the queries and ranks the chosen chunks with ``ts_rank_cd``.

Ranking every chunk that matches any query word costs as much as the word is common: ``ts_rank_cd`` reads
each matching row's ``tsvector``, and a common word matches most of the corpus. So at most ``bound``
chunks are ranked. The contract:

- ``keyword_words(query)``: the query's distinct words, lower-cased, at most ``MAX_QUERY_TERMS``; each is
  ``\\w+``, so none holds a tsquery operator (they are still bound as values).
- ``known_common(lexemes, frequent, rows, listed)``: the words the table's statistics already show to match
  more than ``listed`` chunks (each of their lexemes among ``frequent``, PostgreSQL's most common elements of
  the ``tsvector`` column with the fraction of rows holding each), with their estimated counts. Those words
  are common whatever their exact count, so the store does not count them: counting a word that matches
  most of a million chunks reads thousands of rows, and was most of the leg's time.
- ``plan(counts, listed, budget)``: from each word's match count (counted up to ``listed + 1``), the words
  to *score*: rarest first, each matched by at most ``listed`` chunks, as long as their matches add up to
  at most ``budget`` (the ids the store fetches); the others are *common*. Words that match nothing (stop
  words, absent words) are in neither. A query of thousands of words costs no more than one of a few.
- ``choose(postings, counts, total, bound)``: from the scored words' full match lists, the ``bound`` chunks
  with the highest sum of their matched words' IDF (``log(1 + total / count)``): chunks with rare words
  and with many words first, ties by id. When the scored words' matches fit in ``bound``, they are all
  chosen. Then, if room is left, the store adds chunks holding every common word, and, when no word is
  rare enough to score, chunks holding any of them.

So when every match fits in ``bound``, the set is every match and the ranking is exactly that of ranking
all of them. ``bench/eval/pg_keyword_bound.py`` measures what the bound does on the evaluation sets,
against ranking every match and against taking the first matches the database finds.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MAX_QUERY_TERMS = 64
_WORD = re.compile(r"\w+", re.UNICODE)


def keyword_words(query: str) -> list[str]:
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))[:MAX_QUERY_TERMS]


def known_common(lexemes: Mapping[str, Sequence[str]], frequent: Mapping[str, float], rows: float,
                 listed: int) -> dict[str, int]:
    out = {}
    for word, lexes in lexemes.items():
        if lexes and all(lex in frequent for lex in lexes):
            estimate = min(frequent[lex] for lex in lexes) * rows  # a word of several lexemes needs them all
            if estimate > listed:
                out[word] = int(estimate)
    return out


@dataclass(frozen=True)
class Plan:
    scored: list[str]  # rarest first
    common: list[str]

    @property
    def words(self) -> list[str]:
        return self.scored + self.common


def plan(counts: Mapping[str, int], listed: int, budget: int) -> Plan:
    present = sorted((n, i, w) for i, (w, n) in enumerate(counts.items()) if n > 0)
    scored: list[str] = []
    total = 0
    for n, _i, w in present:
        if n > listed or total + n > budget:
            break
        scored.append(w)
        total += n
    return Plan(scored, [w for _n, _i, w in present if w not in scored])


def idf(count: int, total: int) -> float:
    return math.log(1.0 + max(total, 1) / max(count, 1))


def choose(postings: Mapping[str, Sequence[int]], counts: Mapping[str, int], total: int, bound: int) -> list[int]:
    """The reference of the store's choice, which runs as one SQL statement (the same sums, the same order)."""
    score: defaultdict[int, float] = defaultdict(float)
    for word, ids in postings.items():
        weight = idf(counts.get(word, 1), total)
        for chunk_id in ids:
            score[chunk_id] += weight
    return sorted(score, key=lambda chunk_id: (-score[chunk_id], chunk_id))[:bound]

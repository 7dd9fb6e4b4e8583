"""The PostgreSQL keyword leg's query: which chunks it ranks, and how (``keyword`` holds the pure plan).

``search`` runs two statements on one connection:

1. each query word's matches, counted up to ``listed + 1`` (a GIN lookup each, the filter applied), except
   the words the statistics already show to be common (``WordStats``, unfiltered queries only), and the
   index's row estimate for the words' IDF;
2. one statement choosing the candidates (every match of the scored words, by the sum of their IDF, then
   chunks holding every common word, or any of them when none scored: ``keyword.choose``'s order), at
   most ``bound`` of them, ranked by ``ts_rank_cd`` over the whole query, with the cosine of the k winners.

Every word is a bound value; the statement's shape depends only on how many words there are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Float, Table, column, func, literal, literal_column, select, table, union_all
from sqlalchemy.engine import Connection

from ragengine.retrieval.filters import Filter
from ragengine.stores.postgres.filters import to_sql
from ragengine.stores.postgres.keyword import idf
from ragengine.stores.postgres.keyword import plan as keyword_plan
from ragengine.stores.postgres.schema import TEXT_SEARCH_CONFIG, leaf_name
from ragengine.stores.postgres.word_stats import WordStats

pg_class = table("pg_class", column("oid"), column("reltuples"), schema="pg_catalog")
# The scored words' match lists fetched per query, in all, at most this many times the bound
# (ragengine.stores.postgres.keyword; bench/eval/pg_keyword_bound.py measured the choice).
KEYWORD_LIST_BUDGET = 16


def tsquery(expression: str) -> Any:
    return func.to_tsquery(literal_column(f"'{TEXT_SEARCH_CONFIG}'::regconfig"), literal(expression))


def search(conn: Connection, c: Table, name: str, words: list[str], query_vector: np.ndarray, k: int,
           flt: Filter | None, *, bound: int, listed: int, stats: WordStats) -> Sequence[Any]:
    """Rows (doc_id, seq, text, metadata, rank, distance) of the k best chunks of index ``name`` in ``c``."""
    where = [c.c.index_name == name] + ([to_sql(flt, c.c.metadata)] if flt is not None else [])

    def matching(words_: list[str], op: str) -> Any:
        return select(c.c.id).where(*where, c.c.tsv.op("@@")(tsquery(f" {op} ".join(words_))))

    # Each word's matches counted up to listed + 1 (a GIN lookup each, the filter applied), but for the
    # words the statistics show to be common (unfiltered only), and the index's row estimate for the
    # words' IDF (ragengine.stores.postgres.keyword).
    leaf = leaf_name(c.name, name)
    by_word = {} if flt is not None else stats.known_common(conn, leaf, words, listed)
    counted = [w for w in words if w not in by_word]
    regclass = func.to_regclass(literal(f'"{c.schema}"."{leaf}"'))
    *counts, rows = conn.execute(select(*[
        select(func.count()).select_from(matching([w], "|").limit(listed + 1).subquery()).scalar_subquery()
        for w in counted], select(pg_class.c.reltuples).where(pg_class.c.oid == regclass).scalar_subquery())).one()
    by_word = {w: by_word[w] if w in by_word else counts[counted.index(w)] for w in words}
    chosen = keyword_plan(by_word, listed, bound * KEYWORD_LIST_BUDGET)
    if not chosen.words:
        return []
    # One statement: the candidates (every match of the scored words, by the sum of their IDF, then
    # chunks holding every common word, or any when none scored: keyword.choose's order), at most
    # ``bound``; ranked by the whole query; the cosine for the k winners only.
    total = max(int(rows or 0), sum(by_word.values()))
    branches = [select(matching([w], "|").limit(listed).subquery().c.id,
                       literal(idf(by_word[w], total), Float).label("weight")) for w in chosen.scored]
    if chosen.common:
        fill = matching(chosen.common, "&" if chosen.scored else "|").limit(bound).subquery()
        branches.append(select(fill.c.id, literal(0.0, Float).label("weight")))
    matches = union_all(*branches).subquery()
    score = func.sum(matches.c.weight)
    cand = (select(matches.c.id).group_by(matches.c.id).order_by(score.desc(), matches.c.id)
            .limit(bound).subquery())
    rank = func.ts_rank_cd(c.c.tsv, tsquery(" | ".join(chosen.words)))
    top = (select(c.c.id, rank.label("rank")).join(cand, c.c.id == cand.c.id).where(c.c.index_name == name)
           .order_by(rank.desc(), c.c.id).limit(k).subquery())
    distance = c.c.embedding.cosine_distance(np.asarray(query_vector, dtype=np.float32))
    stmt = (select(c.c.doc_id, c.c.seq, c.c.text, c.c.metadata, top.c.rank, distance.label("distance"))
            .join(top, c.c.id == top.c.id).where(c.c.index_name == name).order_by(top.c.rank.desc(), c.c.id))
    return conn.execute(stmt).all()

"""How the PostgreSQL keyword leg's candidate bound changes its answers, on the evaluation sets.

    .venv/bin/python -m bench.eval.pg_keyword_bound          # after `make eval` installed the sets

At a million chunks the keyword leg cannot rank every match of a common word (``ts_rank_cd`` reads each
row), so it ranks a bounded candidate set (``keyword_candidates``, 2,000 by default). The evaluation
sets are small (200 to 3,000 chunks), so this runs them with bounds that are as small against their
size as 2,000 is against a million (10 and 50 candidates), and compares three ways to choose them:

- ``all``: every match ranked (the code before the bound; the reference);
- ``first``: the first matches the database returns (``LIMIT`` on the match; the first try, rejected);
- ``scored``: the SQL leg's choice (``ragengine.stores.postgres.keyword``: the chunks with the highest sum
  of their matched words' IDF, over the words matched by at most the bound);
- ``memory BM25``: the store's default for unfiltered searches, each replica's in-memory BM25 index
  (``keyword_mirror``: the embedded store's BM25 over the whole index, no candidate bound).

Keyword only (the leg itself, not the fused result): MRR@10 and recall@10 against each set's relevant
documents, and how much of ``all``'s top 10 each keeps. Vectors are random: the keyword ranking does not
read them. Chunks: each document's paragraphs packed up to 1,200 characters. Writes
bench/results/pg_keyword_bound.json and prints a table.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from sqlalchemy import func, select

from bench.common import RESULTS
from bench.eval.datasets import LOADERS, Missing
from bench.eval.metrics import mrr, recall
from bench.eval.report import write_and_print
from ragengine.stores.base import ChunkWrite, DocWrite
from ragengine.stores.postgres.keyword import keyword_words
from ragengine.stores.postgres.keyword_leg import tsquery as _tsquery
from ragengine.stores.postgres.store import PostgresStore, _hit
from tests.support.postgres import postgres_server

K = 10
DIM = 8
BOUNDS = (10, 50)
OUT = RESULTS / "pg_keyword_bound.json"


class FirstMatches(PostgresStore):
    """The rejected bound: the first ``keyword_candidates`` matches of any word, in the database's order."""

    def keyword(self, name: str, query: str, query_vector: np.ndarray, k: int, flt: Any) -> list:
        words = keyword_words(query)
        if not words:
            return []
        with self.engine.connect() as conn:
            c = self._chunks_of(conn, name)
            q = _tsquery(" | ".join(words))
            cand = (select(c.c.id, c.c.tsv).where(c.c.index_name == name, c.c.tsv.op("@@")(q))
                    .limit(max(self.keyword_candidates, k)).subquery())
            rank = func.ts_rank_cd(cand.c.tsv, q)
            top = select(cand.c.id, rank.label("rank")).order_by(rank.desc(), cand.c.id).limit(k).subquery()
            rows = conn.execute(select(c.c.doc_id, c.c.seq, c.c.text, c.c.metadata, top.c.rank)
                                .join(top, c.c.id == top.c.id).order_by(top.c.rank.desc(), c.c.id)).all()
        return [_hit(r.doc_id, r.seq, r.text, r.metadata, 0.0, float(r.rank)) for r in rows]


def chunks_of(text: str, limit: int = 1200) -> list[str]:
    out, cur = [], ""
    for para in (p.strip() for p in text.split("\n\n")):
        if not para:
            continue
        if cur and len(cur) + len(para) + 2 > limit:
            out.append(cur)
            cur = ""
        cur = f"{cur}\n\n{para}" if cur else para
        while len(cur) > limit:
            out.append(cur[:limit])
            cur = cur[limit:]
    return out + ([cur] if cur else [])


def load(store: PostgresStore, name: str, documents: list[dict]) -> int:
    rng = np.random.default_rng(0)
    writes = [DocWrite(d["doc_id"], d["text"], {}, [ChunkWrite(i, t) for i, t in enumerate(chunks_of(d["text"]))])
              for d in documents]
    n = sum(len(w.chunks) for w in writes)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    store.write(name, {}, [], writes, vectors, add_only=True)
    return n


def main() -> None:
    results: dict[str, Any] = {"k": K, "bounds": list(BOUNDS), "sets": {}, "missing": {}}
    started = time.monotonic()
    with postgres_server() as url:
        sql_leg = {"keyword_index": "database"}
        stores = {("all", 0): PostgresStore(url, schema="b_all", dim=DIM, keyword_candidates=10**9, **sql_leg)}
        for bound in BOUNDS:
            stores[("first", bound)] = FirstMatches(url, schema="b_all", dim=DIM, keyword_candidates=bound, **sql_leg)
            stores[("scored", bound)] = PostgresStore(url, schema="b_all", dim=DIM, keyword_candidates=bound, **sql_leg)
        stores[("memory BM25", 0)] = PostgresStore(url, schema="b_all", dim=DIM)  # the default: keyword_mirror
        for store in stores.values():
            store.open()
        for set_name, loader in LOADERS.items():
            try:
                data = loader()
            except Missing as exc:
                results["missing"][set_name] = str(exc)
                continue
            chunks = load(stores[("all", 0)], set_name, data.documents)
            stores[("all", 0)].build_hnsw(set_name)  # a finished load: ANALYZE (the common words' statistics)
            ranked = {key: [[h.doc_id for h in store.keyword(set_name, q.text, np.zeros(DIM), K, None)]
                            for q in data.questions] for key, store in stores.items()}
            rows = {}
            for (how, bound), lists in ranked.items():
                kept = [len(set(a) & set(b)) / max(1, len(set(b))) for a, b in zip(lists, ranked[("all", 0)], strict=True)]
                rows[f"{how} {bound}" if bound else how] = {
                    "mrr@10": float(np.mean([mrr(r, q.relevant, K) for r, q in zip(lists, data.questions, strict=True)])),
                    "recall@10": float(np.mean([recall(r, q.relevant, K) for r, q in zip(lists, data.questions, strict=True)])),
                    "top10_kept": float(np.mean(kept)),
                }
            results["sets"][set_name] = {"chunks": chunks, "questions": len(data.questions), "modes": rows}
        for store in stores.values():
            store.close()
    write_and_print(OUT, results, started,
                    "| set (chunks) | candidates | keyword MRR@10 | recall@10 | top 10 of `all` kept |\n|---|---|---|---|---|",
                    lambda m: f"{m['mrr@10']:.3f} | {m['recall@10']:.3f} | {m['top10_kept']:.2f}")

if __name__ == "__main__":
    main()

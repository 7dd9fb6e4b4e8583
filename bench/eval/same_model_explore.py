"""Same-model techniques tried for the "+0.05 MRR@10 over dense" target (docs/retrieval.md, "Same-model
techniques tried for +0.05"): pseudo-relevance feedback, document-context scoring, BM25 with a title
field or RM3 expansion, and a few other re-scorings that use only all-MiniLM-L6-v2's vectors.

    nice -n 10 .venv/bin/python bench/eval/same_model_cache.py /tmp/quality3      # index + embed once (~4 min)
    .venv/bin/python bench/eval/same_model_explore.py /tmp/quality3 --json bench/results/same_model_explore.json

Everything is scored on the cached vectors with exact (flat) dense search, the engine's BM25Index and
the engine's ``fuse`` (convex, dense weight 0.85, 50 candidates per side), so the "dense" and "hybrid"
rows reproduce ``make eval``'s plain-chunk numbers. Each family's parameters are chosen on the tuning
set (zaragoza-construction-faq) by MRR@10 (then nDCG@10) and only validated on the two others.

Every variant has two rankings: its dense side alone ("dense'"), and that dense side fused with BM25
exactly as the engine fuses today ("hybrid'"); BM25 families change the BM25 side instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "engine"), str(ROOT)]

import numpy as np  # noqa: E402

from bench.eval.metrics import mrr, summarise  # noqa: E402

K = 10
POOL = 50  # candidates per side the engine fuses (settings.fusion_candidates)
RESCORE = 100  # dense candidates a query-time re-scorer looks at
TUNING_SET = "zaragoza-construction-faq"
SETS = ("debian-faq", "zaragoza-construction-faq", "banking-knowledge")


def unit(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


@dataclass
class SetData:
    name: str
    chunk_vecs: np.ndarray  # (chunks, dim), unit
    query_vecs: np.ndarray  # (questions, dim), unit
    chunk_doc: np.ndarray  # chunk -> document index
    doc_ids: list[str]
    chunk_seq: np.ndarray
    chunk_text: list[str]
    chunk_context_text: list[str]
    chunk_title_vecs: np.ndarray  # (chunks, dim): the vector of the chunk's document title
    queries: list[str]
    relevant: list[frozenset[str]]
    cache: Path
    cos: np.ndarray = field(init=False)  # (questions, chunks)
    bm25_lists: list[list[tuple[int, float]]] = field(init=False)

    def __post_init__(self) -> None:
        self.cos = self.query_vecs @ self.chunk_vecs.T
        self.bm25 = build_bm25(self.chunk_text)
        self.bm25_lists = [bm25_search(self.bm25, q, RESCORE) for q in self.queries]
        n_docs = len(self.doc_ids)
        sums = np.zeros((n_docs, self.chunk_vecs.shape[1]), np.float32)
        np.add.at(sums, self.chunk_doc, self.chunk_vecs)
        self.doc_vecs = unit(sums)  # normalised mean of each document's chunk vectors
        self.doc_chunks = np.bincount(self.chunk_doc, minlength=n_docs)
        first = {}
        for c, (d, s) in enumerate(zip(self.chunk_doc, self.chunk_seq, strict=True)):
            if s == 0:
                first[int(d)] = c
        self.first_chunk_vecs = self.chunk_vecs[[first[int(d)] for d in self.chunk_doc]]

    def docs(self, chunks: list[int]) -> list[str]:
        return [self.doc_ids[self.chunk_doc[c]] for c in chunks]


def load(cache: Path, name: str) -> SetData:
    arrays = np.load(cache / f"{name}.npz")
    meta = json.loads((cache / f"{name}.json").read_text())
    doc_ids = list(dict.fromkeys(meta["chunk_doc"]))
    doc_index = {d: i for i, d in enumerate(doc_ids)}
    title_index = {t: i for i, t in enumerate(meta["titles"])}
    title_vecs = arrays["title_vecs"][[title_index[t] for t in meta["chunk_title"]]]
    return SetData(name, arrays["chunk_vecs"], arrays["query_vecs"],
                   np.array([doc_index[d] for d in meta["chunk_doc"]]), doc_ids, np.array(meta["chunk_seq"]),
                   meta["chunk_text"], meta["chunk_context_text"], title_vecs, meta["queries"],
                   [frozenset(r) for r in meta["relevant"]], cache)


def build_bm25(texts: list[str]):
    from ragengine.retrieval.bm25 import BM25Index

    index = BM25Index()
    for slot, text in enumerate(texts):
        index.add(slot, text)
    return index


def bm25_search(index, query: str, k: int) -> list[tuple[int, float]]:
    alive = np.ones(len(index.doc_len), dtype=bool)
    slots, scores = index.search(query, k, alive)
    return [(int(s), float(v)) for s, v in zip(slots, scores, strict=True)]


def bm25_weighted(index, weights: dict[str, float], k: int) -> list[tuple[int, float]]:
    """BM25 with a weight per (already tokenised) query term: what RM3 needs and ``BM25Index.search``
    (a set of terms, each weight 1) does not offer. Same idf / tf saturation as the engine."""
    import math

    n = len(index.doc_len)
    doc_len = np.frombuffer(index.doc_len, dtype=np.uint32).astype(np.float32)
    avgdl = max(index.total_len / index.live, 1.0)
    scores = np.zeros(n, np.float32)
    for term, w in weights.items():
        tid = index.vocab.get(term)
        if tid is None or index.df[tid] == 0:
            continue
        df = index.df[tid]
        idf = math.log(1.0 + (index.live - df + 0.5) / (df + 0.5))
        ids = np.frombuffer(index.postings[tid], dtype=np.uint32)
        tf = np.frombuffer(index.freqs[tid], dtype=np.uint16).astype(np.float32)
        scores[ids] += w * idf * tf * (index.k1 + 1.0) / (tf + index.k1 * (1.0 - index.b + index.b * doc_len[ids] / avgdl))
    hits = np.flatnonzero(scores > 0)
    top = hits[np.argsort(-scores[hits], kind="stable")][:k]
    return [(int(s), float(scores[s])) for s in top]


# -- the two rankings of a variant --------------------------------------------------------------------
def top(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    idx = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
    idx = idx[np.argsort(-scores[idx], kind="stable")]
    return [(int(i), float(scores[i])) for i in idx]


def hybrid(dense: list[tuple[int, float]], sparse: list[tuple[int, float]]) -> list[int]:
    from ragengine.retrieval.hybrid import FusionParams, fuse

    return [k for k, _ in fuse(dense[:POOL], sparse[:POOL], params=FusionParams())]


# A dense-side variant: (set, question index) -> [(chunk, score)] best first, at least POOL long.
DenseFn = Callable[[SetData, int], list[tuple[int, float]]]
# A BM25-side variant: (set, question index) -> [(chunk, BM25 score)] best first.
SparseFn = Callable[[SetData, int], list[tuple[int, float]]]


def plain_dense(s: SetData, qi: int) -> list[tuple[int, float]]:
    return top(s.cos[qi], RESCORE)


def plain_sparse(s: SetData, qi: int) -> list[tuple[int, float]]:
    return s.bm25_lists[qi]


def run_variant(s: SetData, dense_fn: DenseFn = plain_dense, sparse_fn: SparseFn = plain_sparse,
                with_dense: bool = True) -> dict[str, dict]:
    """Scores of the variant's dense' (when it changes the dense side) and hybrid' rankings."""
    d_runs, h_runs, h_mrr = [], [], []
    for qi in range(len(s.queries)):
        dense = dense_fn(s, qi)
        h = s.docs(hybrid(dense, sparse_fn(s, qi))[:K])
        h_runs.append((h, s.relevant[qi]))
        h_mrr.append(mrr(h, s.relevant[qi], K))
        if with_dense:
            d_runs.append((s.docs([c for c, _ in dense[:K]]), s.relevant[qi]))
    out = {"hybrid'": summarise(h_runs, K)}
    out["hybrid'"]["per_question_mrr"] = h_mrr
    if with_dense:
        out["dense'"] = summarise(d_runs, K)
    return out


# -- 1. dense pseudo-relevance feedback (Rocchio) ------------------------------------------------------
def rocchio(beta: float, k: int, rescore_only: bool) -> DenseFn:
    """q' = unit(q + beta * mean of the top-k dense chunk vectors); search again (``rescore_only``: just
    re-score the first search's RESCORE candidates, which costs RESCORE dot products, not a second search)."""
    def fn(s: SetData, qi: int) -> list[tuple[int, float]]:
        first = top(s.cos[qi], RESCORE)
        fb = s.chunk_vecs[[c for c, _ in first[:k]]].mean(axis=0)
        q2 = unit(s.query_vecs[qi] + beta * fb)
        if rescore_only:
            idx = np.array([c for c, _ in first])
            sc = s.chunk_vecs[idx] @ q2
            order = np.argsort(-sc, kind="stable")
            return [(int(idx[o]), float(sc[o])) for o in order]
        return top(s.chunk_vecs @ q2, RESCORE)
    return fn


# -- 2. document-context scoring ----------------------------------------------------------------------
def doc_context(lam: float, signal: str) -> DenseFn:
    """cos(q, chunk) + lam * a document-level signal, over the RESCORE dense candidates:
    - ``best_other``: the best cosine among the candidates of the same document's other chunks (else 0);
    - ``sum_other``: the sum of (cosine - the candidates' lowest) over those other chunks;
    - ``doc_vec``: cosine of q to the document vector (normalised mean of its chunk vectors);
    - ``title``: cosine of q to the document title's vector;
    - ``first``: cosine of q to the document's first chunk."""
    def fn(s: SetData, qi: int) -> list[tuple[int, float]]:
        cand = top(s.cos[qi], RESCORE)
        idx = np.array([c for c, _ in cand])
        cos = np.array([v for _, v in cand], np.float32)
        q = s.query_vecs[qi]
        if signal in ("best_other", "sum_other"):
            docs = s.chunk_doc[idx]
            sig = np.zeros(len(idx), np.float32)
            floor = float(cos.min())
            for i in range(len(idx)):
                same = (docs == docs[i])
                same[i] = False
                if same.any():
                    sig[i] = cos[same].max() if signal == "best_other" else (cos[same] - floor).sum()
        elif signal == "doc_vec":
            sig = s.doc_vecs[s.chunk_doc[idx]] @ q
        elif signal == "title":
            sig = s.chunk_title_vecs[idx] @ q
        elif signal == "first":
            sig = s.first_chunk_vecs[idx] @ q
        else:
            raise ValueError(signal)
        sc = cos + lam * sig
        order = np.argsort(-sc, kind="stable")
        return [(int(idx[o]), float(sc[o])) for o in order]
    return fn


# -- 4. other same-model re-scorings ------------------------------------------------------------------
def index_time_vectors(s: SetData, how: str, alpha: float) -> np.ndarray:
    """Chunk vectors changed once at indexing (no query-time cost):
    - ``doc``: unit(chunk + alpha * document vector) (chunks that know their document, in vector space);
    - ``neighbours``: unit(chunk + alpha * mean of the previous and next chunk of the same document);
    - ``title``: unit(chunk + alpha * title vector);
    - ``centre``: unit(chunk - alpha * corpus mean) (MiniLM's vectors share a common direction)."""
    v = s.chunk_vecs
    if how == "doc":
        return unit(v + alpha * s.doc_vecs[s.chunk_doc])
    if how == "title":
        return unit(v + alpha * s.chunk_title_vecs)
    if how == "centre":
        return unit(v - alpha * v.mean(axis=0))
    if how == "neighbours":
        out = v.copy()
        for c in range(len(v)):
            nb = [n for n in (c - 1, c + 1) if 0 <= n < len(v) and s.chunk_doc[n] == s.chunk_doc[c]]
            if nb:
                out[c] = v[c] + alpha * v[nb].mean(axis=0)
        return unit(out)
    raise ValueError(how)


def vectors_variant(how: str, alpha: float) -> DenseFn:
    cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def fn(s: SetData, qi: int) -> list[tuple[int, float]]:
        if s.name not in cache:
            vecs = index_time_vectors(s, how, alpha)
            q = unit(s.query_vecs - alpha * s.chunk_vecs.mean(axis=0)) if how == "centre" else s.query_vecs
            cache[s.name] = (vecs, q @ vecs.T)
        return top(cache[s.name][1][qi], RESCORE)
    return fn


def hubness(gamma: float, k: int) -> DenseFn:
    """CSLS-style hub penalty: cos(q, c) - gamma * (mean cosine of c to its k nearest other chunks),
    the second term computed once at indexing. Chunks close to everything stop winning every query."""
    cache: dict[str, np.ndarray] = {}

    def fn(s: SetData, qi: int) -> list[tuple[int, float]]:
        if s.name not in cache:
            sim = s.chunk_vecs @ s.chunk_vecs.T
            np.fill_diagonal(sim, -1.0)
            cache[s.name] = np.sort(sim, axis=1)[:, -k:].mean(axis=1)
        return top(s.cos[qi] - gamma * cache[s.name], RESCORE)
    return fn


def extras(s: SetData) -> dict[str, np.ndarray]:
    """Sentence and contextual-chunk vectors from ``same_model_cache.py --extras`` (loaded once)."""
    if not hasattr(s, "_extras"):
        s._extras = dict(np.load(s.cache / f"{s.name}.extra.npz"))  # type: ignore[attr-defined]
    return s._extras  # type: ignore[attr-defined]


def sentence_maxsim(mu: float, replace: bool) -> DenseFn:
    """cos(q, chunk) + mu * the best cosine of q to one of the chunk's sentences (each sentence embedded
    alone at indexing), over the RESCORE dense candidates; ``replace``: max(chunk, best sentence) instead.
    A long chunk whose one sentence answers the question is diluted in the chunk's mean-pooled vector."""
    def fn(s: SetData, qi: int) -> list[tuple[int, float]]:
        ex = extras(s)
        if not hasattr(s, "_sent_of"):
            owner = ex["sentence_chunk"]
            s._sent_of = [np.flatnonzero(owner == c) for c in range(len(s.chunk_text))]  # type: ignore[attr-defined]
        cand = top(s.cos[qi], RESCORE)
        idx = np.array([c for c, _ in cand])
        cos = np.array([v for _, v in cand], np.float32)
        q = s.query_vecs[qi]
        best = np.array([float((ex["sentence_vecs"][s._sent_of[c]] @ q).max()) for c in idx], np.float32)  # type: ignore[attr-defined]
        sc = np.maximum(cos, best) if replace else cos + mu * best
        order = np.argsort(-sc, kind="stable")
        return [(int(idx[o]), float(sc[o])) for o in order]
    return fn


def dual_vectors(mu: float) -> DenseFn:
    """cos(q, plain chunk) + mu * cos(q, contextual chunk: title and section path + chunk), both vectors
    stored at indexing, over the RESCORE plain-dense candidates."""
    def fn(s: SetData, qi: int) -> list[tuple[int, float]]:
        ctx = extras(s)["context_vecs"]
        cand = top(s.cos[qi], RESCORE)
        idx = np.array([c for c, _ in cand])
        sc = np.array([v for _, v in cand], np.float32) + mu * (ctx[idx] @ s.query_vecs[qi])
        order = np.argsort(-sc, kind="stable")
        return [(int(idx[o]), float(sc[o])) for o in order]
    return fn


def query_pieces(how: str, combine: str) -> DenseFn:
    """Long questions embedded in pieces (``same_model_cache.py --query-pieces``): ``how`` = win254 (the
    model's whole window, 254 tokens), win128, or sent (sentences); ``combine`` = mean (one vector, the
    normalised mean of the pieces' vectors), wmean (the same, each piece weighted by its tokens), max
    (a chunk scores its best cosine to any piece), or plus (the normalised sum of the whole-question
    vector, as today, and the pieces' mean). A question that fits one window is embedded as today."""
    def fn(s: SetData, qi: int) -> list[tuple[int, float]]:
        if not hasattr(s, "_qp"):
            s._qp = dict(np.load(s.cache / f"{s.name}.queries.npz"))  # type: ignore[attr-defined]
        mine = s._qp[f"{how}_query"] == qi  # type: ignore[attr-defined]
        vecs = s._qp[f"{how}_vecs"][mine]  # type: ignore[attr-defined]
        if combine == "max":
            return top((s.chunk_vecs @ vecs.T).max(axis=1), RESCORE)
        if combine == "wmean":
            w = s._qp[f"{how}_tokens"][mine].astype(np.float32)  # type: ignore[attr-defined]
            return top(s.chunk_vecs @ unit((vecs * w[:, None]).sum(axis=0)), RESCORE)
        mean = vecs.mean(axis=0)
        q = unit(mean + s.query_vecs[qi]) if combine == "plus" else unit(mean)
        return top(s.chunk_vecs @ q, RESCORE)
    return fn


# -- 3. BM25 sides -------------------------------------------------------------------------------------
def bm25_context(boost: int) -> SparseFn:
    """BM25 over the chunk text plus its title / section path line repeated ``boost`` times (a boosted
    title field in a one-field index); the dense side stays on plain chunks."""
    cache: dict[str, list] = {}

    def fn(s: SetData, qi: int) -> list[tuple[int, float]]:
        if s.name not in cache:
            texts = []
            for plain, ctx in zip(s.chunk_text, s.chunk_context_text, strict=True):
                head = ctx[: len(ctx) - len(plain)].strip() if ctx.endswith(plain) else ""
                texts.append(((head + "\n") * boost) + plain)
            index = build_bm25(texts)
            cache[s.name] = [bm25_search(index, q, RESCORE) for q in s.queries]
        return cache[s.name][qi]
    return fn


def rm3(fb_docs: int, fb_terms: int, orig_weight: float) -> SparseFn:
    """RM3: the query's terms (weight ``orig_weight``, spread evenly) plus the ``fb_terms`` terms most
    likely under the top ``fb_docs`` BM25 chunks' term distributions weighted by their scores (weight 1 -
    ``orig_weight``), searched again with weighted BM25."""
    from ragengine.retrieval.bm25 import tokenize

    cache: dict[str, dict[int, list[str]]] = {}

    def fn(s: SetData, qi: int) -> list[tuple[int, float]]:
        toks = cache.setdefault(s.name, {})
        first = s.bm25_lists[qi][:fb_docs]
        q_terms = set(tokenize(s.queries[qi]))
        if not first or not q_terms:
            return s.bm25_lists[qi]
        total = sum(v for _, v in first)
        model: dict[str, float] = {}
        for c, v in first:
            words = toks.setdefault(c, tokenize(s.chunk_text[c]))
            for w in words:
                model[w] = model.get(w, 0.0) + (v / total) / len(words)
        expansion = sorted(model.items(), key=lambda kv: -kv[1])[:fb_terms]
        z = sum(p for _, p in expansion) or 1.0
        weights = {t: orig_weight / len(q_terms) for t in q_terms}
        for t, p in expansion:
            weights[t] = weights.get(t, 0.0) + (1 - orig_weight) * p / z
        norm = max(weights.values())
        return bm25_weighted(s.bm25, {t: w / norm for t, w in weights.items()}, RESCORE)
    return fn


# -- the exploration ----------------------------------------------------------------------------------
def families() -> list[tuple[str, str, dict]]:
    """(family, parameters, {"dense": DenseFn} or {"sparse": SparseFn}) for every grid point."""
    out: list[tuple[str, str, dict]] = []
    for rescore_only in (False, True):
        fam = "Rocchio PRF, re-score the first 100" if rescore_only else "Rocchio PRF, second search"
        for beta in (0.2, 0.4, 0.6, 0.8, 1.0):
            for k in (1, 3, 5):
                out.append((fam, f"beta={beta} k={k}", {"dense": rocchio(beta, k, rescore_only)}))
    for signal in ("best_other", "sum_other", "doc_vec", "title", "first"):
        for lam in (0.05, 0.1, 0.2, 0.3, 0.5, 1.0):
            out.append((f"doc context: cos + lambda*{signal}", f"lambda={lam}", {"dense": doc_context(lam, signal)}))
    for how in ("doc", "neighbours", "title", "centre"):
        for alpha in (0.1, 0.2, 0.3, 0.5, 0.75, 1.0):
            out.append((f"index-time chunk vectors: {how}", f"alpha={alpha}", {"dense": vectors_variant(how, alpha)}))
    for gamma in (0.1, 0.25, 0.5, 0.75, 1.0):
        for k in (5, 10, 20):
            out.append(("hub penalty (CSLS)", f"gamma={gamma} k={k}", {"dense": hubness(gamma, k)}))
    for mu in (0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5):
        out.append(("sentence max-sim: cos + mu*best sentence", f"mu={mu}", {"dense": sentence_maxsim(mu, False)}))
    out.append(("sentence max-sim: max(cos, best sentence)", "", {"dense": sentence_maxsim(0.0, True)}))
    for mu in (0.1, 0.2, 0.3, 0.5, 0.75, 1.0):
        out.append(("plain + contextual chunk vectors: cos + mu*cos_ctx", f"mu={mu}", {"dense": dual_vectors(mu)}))
    # One family: the tuning set's questions all fit one window, so it cannot choose among these (a tie
    # keeps the first, the a-priori choice: the model's whole window, token-weighted mean).
    for how in ("win254", "win128", "sent"):
        for combine in ("wmean", "mean", "max", "plus"):
            out.append(("long questions in pieces", f"{how} {combine}", {"dense": query_pieces(how, combine)}))
    for boost in (1, 2, 3):
        out.append(("BM25 + title/section field", f"boost={boost}", {"sparse": bm25_context(boost)}))
    for fb_docs in (3, 5, 10):
        for fb_terms in (10, 20):
            for ow in (0.5, 0.7, 0.9):
                out.append(("BM25 + RM3 expansion", f"docs={fb_docs} terms={fb_terms} orig={ow}",
                            {"sparse": rm3(fb_docs, fb_terms, ow)}))
    return out


def paired_bootstrap(a: list[float], b: list[float], resamples: int = 2000, seed: int = 0) -> list[float]:
    """Mean of a - b with a 95% percentile interval, resampling questions."""
    diff = np.asarray(a) - np.asarray(b)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (resamples, len(diff)))].mean(axis=1)
    return [float(diff.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def explore(sets: dict[str, SetData], log, only: str | None = None) -> dict:
    rows: dict[str, dict] = {}
    base = {}
    for name, s in sets.items():
        r = run_variant(s)
        base[name] = {"dense": r["dense'"], "bm25": summarise([(s.docs([c for c, _ in s.bm25_lists[qi][:K]]), s.relevant[qi])
                                                               for qi in range(len(s.queries))], K),
                      "hybrid": r["hybrid'"]}
    for family, params, fn in families():
        if only and only not in family:
            continue
        started = time.perf_counter()
        key = f"{family} [{params}]"
        rows[key] = {"family": family, "params": params, "sets": {}}
        for name, s in sets.items():
            if "dense" in fn:
                rows[key]["sets"][name] = run_variant(s, dense_fn=fn["dense"])
            else:
                rows[key]["sets"][name] = run_variant(s, sparse_fn=fn["sparse"], with_dense=False)
        log(f"{key}: {time.perf_counter() - started:.1f} s")
    return {"baselines": base, "variants": rows}


def choose(result: dict, sets: list[str], ref: dict) -> list[dict]:
    """Per family and ranking (dense' / hybrid'), the tuning set's best parameters and their scores
    everywhere: "never below" against this pass's own dense and BM25, the mean gain against today's
    dense (``ref``). ``blind``: no grid point changes the tuning set's scores (ties keep the first)."""
    base = result["baselines"]
    best: dict[tuple[str, str], tuple] = {}
    for key, row in result["variants"].items():
        for ranking, m in row["sets"][TUNING_SET].items():
            cand = (m["mrr@10"], m["ndcg@10"])
            slot = (row["family"], ranking)
            if slot not in best or cand > best[slot][0]:
                best[slot] = (cand, key)
    table = []
    dense_mean = np.mean([ref[n]["dense"]["mrr@10"] for n in sets])
    for (family, ranking), (_, key) in best.items():
        row = result["variants"][key]
        mrrs = {n: row["sets"][n][ranking]["mrr@10"] for n in sets}
        recalls = {n: row["sets"][n][ranking]["recall@10"] for n in sets}
        never_loses = all(mrrs[n] >= max(base[n]["dense"]["mrr@10"], base[n]["bm25"]["mrr@10"]) for n in sets)
        hindsight = max((r for r in result["variants"].values() if r["family"] == family),
                        key=lambda r: np.mean([r["sets"][n][ranking]["mrr@10"] for n in sets]))
        hindsight_gain = float(np.mean([hindsight["sets"][n][ranking]["mrr@10"] for n in sets]) - dense_mean)
        base_tuning = base[TUNING_SET]["dense" if ranking == "dense'" else "hybrid"]
        blind = all(abs(r["sets"][TUNING_SET][ranking]["mrr@10"] - base_tuning["mrr@10"]) < 1e-12
                    and abs(r["sets"][TUNING_SET][ranking]["ndcg@10"] - base_tuning["ndcg@10"]) < 1e-12
                    for r in result["variants"].values() if r["family"] == family)
        table.append({"family": family, "ranking": ranking, "params": row["params"], "key": key, "blind": blind,
                      "mrr@10": mrrs,
                      "hindsight_params": hindsight["params"], "hindsight_mean_minus_dense": hindsight_gain,
                      "recall@10": recalls, "mean_minus_dense": float(np.mean(list(mrrs.values())) - dense_mean),
                      "never_below_max_dense_bm25": never_loses})
    return sorted(table, key=lambda r: -r["mean_minus_dense"])


def markdown(result: dict, table: list[dict], sets: list[str], ref: dict, rankings: tuple[str, ...]) -> str:
    """The table of docs/retrieval.md: this pass's base rows, then each family's tuning-set choice."""
    base = result["baselines"]
    head = ("| family | ranking | chosen on the tuning set | " + " | ".join(f"{n} MRR / R@10" for n in sets)
            + " | never below max(dense, BM25) | mean MRR − dense | best in hindsight (chosen on all sets) |")
    lines = [head, "|---|---|---|" + "---|" * len(sets) + "---|---|---|"]
    for mode in ("dense", "bm25", "hybrid"):
        cells = " | ".join(f"{base[n][mode]['mrr@10']:.3f} / {base[n][mode]['recall@10']:.3f}" for n in sets)
        gain = np.mean([base[n][mode]["mrr@10"] - ref[n]["dense"]["mrr@10"] for n in sets])
        lines.append(f"| {mode} (base) | | | {cells} | | {gain:+.3f} | |")
    for r in table:
        if r["ranking"] not in rankings:
            continue
        cells = " | ".join(f"{r['mrr@10'][n]:.3f} / {r['recall@10'][n]:.3f}" for n in sets)
        chosen = (r["params"] or "—") + (" (tie: no effect on the tuning set)" if r["blind"] else "")
        lines.append(f"| {r['family']} | {r['ranking']} | {chosen} | {cells} | "
                     f"{'yes' if r['never_below_max_dense_bm25'] else 'no'} | {r['mean_minus_dense']:+.3f} | "
                     f"{r['hindsight_mean_minus_dense']:+.3f} ({r['hindsight_params'] or '—'}) |")
    return "\n".join(lines)


def with_long_questions(s: SetData) -> SetData:
    """The same set with every question embedded as the token-weighted mean of its 254-token windows
    (``long questions in pieces: win254, wmean``); questions that fit one window are unchanged."""
    qp = dict(np.load(s.cache / f"{s.name}.queries.npz"))
    vecs = np.zeros_like(s.query_vecs)
    np.add.at(vecs, qp["win254_query"], qp["win254_vecs"] * qp["win254_tokens"][:, None].astype(np.float32))
    out = dataclasses.replace(s, query_vecs=unit(vecs))
    for name in ("_extras", "_sent_of"):
        if hasattr(s, name):
            setattr(out, name, getattr(s, name))
    return out


def bootstraps(result: dict, table: list[dict], ref: dict, names: list[str]) -> dict:
    """Paired bootstrap of the tuning-set choice with the best mean (hybrid') against today's hybrid."""
    best = next((r for r in table if r["ranking"] == "hybrid'"), None)
    if best is None:
        return {}
    row = result["variants"][best["key"]]
    return {"variant": best["key"], **{n: paired_bootstrap(row["sets"][n]["hybrid'"]["per_question_mrr"],
                                                   ref[n]["hybrid"]["per_question_mrr"]) for n in names}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cache", type=Path, help="the folder bench/eval/same_model_cache.py wrote")
    ap.add_argument("--json", type=Path, help="write every variant's scores here")
    ap.add_argument("--only", help="only the families whose name contains this")
    ap.add_argument("--no-stack", action="store_true", help="skip the second pass over long questions in pieces")
    ap.add_argument("--hybrid-only", action="store_true", help="print only the hybrid' rows (the tables in docs)")
    args = ap.parse_args()
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:5.0f} s] {msg}", file=sys.stderr, flush=True)

    sets = {n: load(args.cache, n) for n in SETS if (args.cache / f"{n}.npz").exists()}
    names = list(sets)
    passes = {"questions as today (cut at 256 tokens)": sets}
    if not args.no_stack:
        passes["on top of long questions in pieces (win254, wmean)"] = {n: with_long_questions(s) for n, s in sets.items()}
    out: dict = {"k": K, "pool_per_side": POOL, "rescore_candidates": RESCORE, "tuning_set": TUNING_SET, "passes": {}}
    rankings = ("hybrid'",) if args.hybrid_only else ("dense'", "hybrid'")
    ref = None
    for label, pass_sets in passes.items():
        log(label)
        only = args.only
        result = explore(pass_sets, log, only)
        if ref is None:
            ref = result["baselines"]
        else:  # the long-question family itself is the base of this pass
            result["variants"] = {k: v for k, v in result["variants"].items() if not k.startswith("long questions")}
        table = choose(result, names, ref)
        result["best_vs_today_hybrid_bootstrap"] = bootstraps(result, table, ref, names) if TUNING_SET in sets else {}
        print(f"\n### {label}\n\n" + markdown(result, table, names, ref, rankings))
        result["chosen"] = table
        out["passes"][label] = result
    if args.json:
        for result in out["passes"].values():  # per-question lists were for the bootstrap; keep the file small
            for row in result["variants"].values():
                for per_set in row["sets"].values():
                    per_set["hybrid'"].pop("per_question_mrr", None)
        for result in out["passes"].values():
            for b in result["baselines"].values():
                b["hybrid"].pop("per_question_mrr", None)
        args.json.write_text(json.dumps(out, indent=1, default=float))
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())

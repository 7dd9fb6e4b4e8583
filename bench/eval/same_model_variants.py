"""The same-model technique families of the exploration (``same_model_explore``): each grid point is a
dense-side (``DenseFn``) or BM25-side (``SparseFn``) variant of the plain rankings; ``families`` lists
them all."""

from __future__ import annotations

import numpy as np

from bench.eval.same_model_data import (
    RESCORE,
    DenseFn,
    SetData,
    SparseFn,
    bm25_search,
    bm25_weighted,
    build_bm25,
    top,
    unit,
)


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

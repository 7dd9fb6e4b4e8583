"""Index each evaluation set once (plain chunks, the engine's own IndexRegistry, as bench/eval/run.py does)
and keep what same-model re-ranking experiments need: every chunk's vector, document, position and text,
every question's vector and text, the relevant documents, and the vectors of the document titles.

    nice -n 10 .venv/bin/python -m bench.eval.same_model_cache /tmp/quality3            # ~3-4 min on 2 cores
    nice -n 10 .venv/bin/python -m bench.eval.same_model_cache /tmp/quality3 --extras   # sentences, contextual chunks
    nice -n 10 .venv/bin/python -m bench.eval.same_model_cache /tmp/quality3 --query-pieces   # long questions cut

Each set becomes ``DIR/<set>.npz`` (arrays) and ``DIR/<set>.json`` (texts, ids); bench/eval/same_model_explore.py
reads them, so every variant it scores costs seconds instead of re-embedding the sets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path

import numpy as np

from bench.eval import datasets as ds
from bench.eval import run  # (sets HF_HUB_OFFLINE before the embedder loads)


async def cache_set(data: ds.Dataset, embedder, out: Path) -> None:
    from ragengine.index.contextual import index_texts

    async with run.SetRun(data, embedder, contextual=False, reranker=None) as sr:
        st = sr.state
        alive = np.flatnonzero(st.store.alive[: st.store.ntotal])
        vectors = np.array(st.store.vectors()[alive], dtype=np.float32)
        chunks = [st.chunk(int(s)) for s in alive]
        titles = sorted({str(rec.metadata.get("title", "")) for rec, _, _ in chunks})
        title_vecs = embedder.embed_texts_sync(titles) if titles else np.zeros((0, vectors.shape[1]), np.float32)
        np.savez(out / f"{data.name}.npz", chunk_vecs=vectors, query_vecs=np.asarray(sr.qvecs, np.float32),
                 title_vecs=np.asarray(title_vecs, np.float32))
        (out / f"{data.name}.json").write_text(json.dumps({
            "chunk_doc": [rec.doc_id for rec, _, _ in chunks],
            "chunk_seq": [int(i) for _, i, _ in chunks],
            "chunk_text": [text for _, _, text in chunks],
            "chunk_title": [str(rec.metadata.get("title", "")) for rec, _, _ in chunks],
            # the title + section path line that contextual chunks would carry (for keyword-only experiments)
            "chunk_context_text": [index_texts(rec.text, rec.metadata, rec.spans, contextual=True)[i] for rec, i, _ in chunks],
            "titles": titles,
            "queries": [q.text for q in data.questions],
            "relevant": [sorted(q.relevant) for q in data.questions],
        }))
        print(f"{data.name}: {len(alive)} chunks, {len(data.questions)} questions, {len(titles)} titles", flush=True)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])|\n\s*\n")


def sentences(chunk: str, min_words: int = 6) -> list[str]:
    """The chunk cut at sentence ends and blank lines, wrapped lines joined; fragments shorter than
    ``min_words`` words are merged into the next piece (headings, list bullets)."""
    out: list[str] = []
    carry = ""
    for piece in _SENTENCE_END.split(chunk):
        piece = " ".join((carry + " " + piece).split())
        if len(piece.split()) < min_words:
            carry = piece
            continue
        out.append(piece)
        carry = ""
    if carry:
        if out:
            out[-1] = out[-1] + " " + carry
        else:
            out.append(carry)
    return out or [chunk]


def cache_extras(name: str, embedder, out: Path) -> None:
    """Vectors of each chunk's sentences (``sentence_vecs`` with ``sentence_chunk``) and of the
    contextual chunk text (title and section path + chunk), for the re-scoring experiments."""
    meta = json.loads((out / f"{name}.json").read_text())
    pieces, owner = [], []
    for c, text in enumerate(meta["chunk_text"]):
        for sent in sentences(text):
            pieces.append(sent)
            owner.append(c)
    sent_vecs = embedder.embed_texts_sync(pieces)
    ctx_vecs = embedder.embed_texts_sync(meta["chunk_context_text"])
    np.savez(out / f"{name}.extra.npz", sentence_vecs=np.asarray(sent_vecs, np.float32),
             sentence_chunk=np.array(owner), context_vecs=np.asarray(ctx_vecs, np.float32))
    print(f"{name}: {len(pieces)} sentences embedded, {len(meta['chunk_text'])} contextual chunks", flush=True)


def token_windows(embedder, text: str, size: int) -> list[str]:
    """``text`` cut into consecutive pieces of at most ``size`` model tokens (at token boundaries)."""
    offsets = embedder.token_offsets(text) or []
    if len(offsets) <= size:
        return [text]
    return [text[offsets[i][0]: offsets[min(i + size, len(offsets)) - 1][1]] for i in range(0, len(offsets), size)]


def cache_query_pieces(name: str, embedder, out: Path) -> None:
    """Vectors of each question's token windows (254 = the whole model window, and 128) and sentences:
    the long banking scenarios are cut at the model's 256 tokens when embedded whole."""
    meta = json.loads((out / f"{name}.json").read_text())
    arrays: dict[str, np.ndarray] = {}
    cutters = {"win254": lambda q: token_windows(embedder, q, embedder.chunk_token_limit),
               "win128": lambda q: token_windows(embedder, q, 128), "sent": sentences}
    for key, cut in cutters.items():
        pieces, owner = [], []
        for qi, q in enumerate(meta["queries"]):
            for piece in cut(q):
                pieces.append(piece)
                owner.append(qi)
        arrays[f"{key}_vecs"] = np.asarray(embedder.embed_queries_sync(pieces), np.float32)
        arrays[f"{key}_query"] = np.array(owner)
        arrays[f"{key}_tokens"] = np.array([embedder.count_tokens(p) for p in pieces])
        print(f"{name}: {len(pieces)} query pieces ({key})", flush=True)
    np.savez(out / f"{name}.queries.npz", **arrays)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--sets", nargs="*", default=list(ds.LOADERS))
    ap.add_argument("--extras", action="store_true", help="embed the cached sets' sentences and contextual chunks")
    ap.add_argument("--query-pieces", action="store_true", help="embed the cached sets' question windows and sentences")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings

    embedder = build_embedder(EngineSettings())
    try:
        for name in args.sets:
            if args.query_pieces:
                cache_query_pieces(name, embedder, args.out)
                continue
            if args.extras:
                cache_extras(name, embedder, args.out)
                continue
            asyncio.run(cache_set(ds.LOADERS[name](), embedder, args.out))
    finally:
        embedder.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

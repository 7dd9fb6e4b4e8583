"""Retrieval quality on the Debian FAQ (apt's debian-faq): dense, BM25, hybrid, hybrid + rerank."""

from __future__ import annotations

import asyncio
import gzip
import re
import tempfile
from pathlib import Path

FAQ = Path("/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz")


HEADING = re.compile(r"^(\d+)\.(\d+)\.\u00a0(.*)$")


CHAPTER = re.compile(r"^Chapter\u00a0\d+\.")


def faq_dataset() -> list[tuple[str, str, str]]:
    """(section id, question = heading, answer = section text without its heading)."""
    with gzip.open(FAQ, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if CHAPTER.match(line))
    items, current, title, body, in_title = [], None, [], [], False
    for line in [*lines[start:], "Chapter\u00a099. end"]:
        m = HEADING.match(line)
        if m or CHAPTER.match(line):
            if current:
                answer = "\n".join(body).strip()
                if answer:
                    items.append((current, " ".join(title).strip(), answer))
            current = f"{m.group(1)}.{m.group(2)}" if m else None
            title, body, in_title = ([m.group(3)] if m else []), [], bool(m)
            continue
        if in_title:
            if line.strip():
                title.append(line.strip())
                continue
            in_title = False
        if current:
            body.append(line.replace("\u00a0", " "))
    return items


def bench_quality(emb, rerank_model: str | None) -> dict:
    from ragengine.index.registry import IndexRegistry
    from ragengine.settings import EngineSettings

    if not FAQ.exists():
        return {"error": f"{FAQ} missing: apt-get install -y debian-faq"}
    items = faq_dataset()
    reranker, rerank_note = None, None
    if rerank_model:
        from ragengine.retrieval.rerank import Reranker

        try:
            reranker = Reranker(rerank_model)
        except Exception as exc:
            rerank_note = f"could not load {rerank_model}: {exc}"
    else:
        rerank_note = ("n/a: no cross-encoder ships in a PyPI package and the hub is unreachable offline "
                       "(pass --rerank-model PATH to measure one)")

    async def run() -> dict:
        with tempfile.TemporaryDirectory() as tmp:
            settings = EngineSettings(data_dir=Path(tmp))
            registry = IndexRegistry(settings, emb, None)
            await registry.start()
            await registry.add_documents("faq", [{"doc_id": sid, "text": ans} for sid, _, ans in items])
            state = registry.get("faq")
            out = {}

            async def evaluate(mode: str) -> dict:
                rr, hit = 0.0, 0
                for sid, question, _ in items:
                    if mode == "bm25":
                        slots, _ = state.bm25.search(question, 50, state.store.alive)
                        docs = [state.chunk(int(s))[0].doc_id for s in slots]
                    else:
                        settings.hybrid = mode != "dense"
                        registry.reranker = reranker if mode == "hybrid+rerank" else None
                        nodes = await registry.retrieve("faq", question, 30)
                        docs = [n.doc_id for n in nodes]
                    ranked = list(dict.fromkeys(docs))[:10]
                    if sid in ranked:
                        hit += 1
                        rr += 1.0 / (ranked.index(sid) + 1)
                return {"mrr_at_10": rr / len(items), "recall_at_10": hit / len(items)}

            for mode in ("dense", "bm25", "hybrid"):
                out[mode] = await evaluate(mode)
            out["hybrid+rerank"] = await evaluate("hybrid+rerank") if reranker else {"n/a": rerank_note}
            out["chunks"] = state.n_chunks
            await registry.close()
            return out

    result = asyncio.run(run())
    return {"questions": len(items), **result}

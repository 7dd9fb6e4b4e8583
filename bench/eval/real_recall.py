"""Dense recall@10 at a million chunks of real text, embedded by a real model (not synthetic clusters).

    .venv/bin/python -m bench.eval.real_recall                 # FAISS and PostgreSQL, up to 1M passages
    .venv/bin/python -m bench.eval.real_recall --chunks 200000 --stores postgres

``bench/bench_stores.py`` measures recall on Gaussian clusters (1,000 centres, iid noise). At 1M chunks each
query's 10 nearest sit among ~1,000 nearly equidistant points: the hardest case for graph search, and not
what embeddings of text look like. This measures the same HNSW settings on real text:
- passages of 12 to 30 words cut from the text installed on this machine: the docstrings and comments of the
  Python packages in the engine's environment, /usr/share/doc, and the Go module cache when there is one
  (``hack/`` builds the control plane from it); exact duplicates dropped. How many it found is printed;
- embedded with WordLlama (``wordllama:l2_supercat``, 256 dimensions), the engine's second installable
  model: a million passages embed in minutes here, where the default MiniLM would take hours on 2 cores;
- indexed through the engine's registry with precomputed vectors (PostgreSQL: HNSW built after the load);
- queried with 200 passages held out of the index, against an exact search; the HNSW search breadth from
  64 to 512, dense only (the leg that recall is about).
Writes bench/results/real_recall.json and prints a table.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import hashlib
import json
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.bench_stores import EF_CURVE, dense_recall, registry_for, set_ef
from bench.common import RESULTS, pct, write_result
from tests.support.postgres import postgres_server

MODEL = "wordllama:l2_supercat"
QUERIES = 200
WORDS = (12, 30)
OUT = RESULTS / "real_recall.json"
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")


def text_roots() -> list[Path]:
    import sysconfig

    roots = [Path(sysconfig.get_paths()["purelib"]), Path("/usr/share/doc"), Path.home() / "go" / "pkg" / "mod"]
    return [r for r in roots if r.is_dir()]


def _prose(path: Path) -> Iterator[str]:
    """Paragraphs of natural language in one file: docstrings and comment blocks of code, paragraphs of docs."""
    source = path.read_text(encoding="utf-8", errors="ignore")
    if path.suffix == ".py":
        try:
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    yield from re.split(r"\n\s*\n", ast.get_docstring(node) or "")
        except (SyntaxError, ValueError):
            pass
    if path.suffix in (".py", ".go"):
        mark = "#" if path.suffix == ".py" else "//"
        block: list[str] = []
        for line in source.splitlines():
            if line.strip().startswith(mark):
                block.append(line.strip().lstrip(mark + " "))
            elif block:
                yield " ".join(block)
                block = []
    elif path.suffix in (".md", ".rst", ".txt", ""):
        yield from re.split(r"\n\s*\n", source)


def passages(limit: int) -> list[str]:
    """Up to ``limit`` distinct passages of real prose from the files installed here (file order fixed)."""
    seen: set[bytes] = set()
    out: list[str] = []
    for root in text_roots():
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".go", ".md", ".rst", ".txt", "")):
            if not path.is_file() or path.stat().st_size > 2_000_000:
                continue
            for para in _prose(path):
                words = para.split()
                for i in range(0, len(words), WORDS[1]):
                    part = words[i:i + WORDS[1]]
                    if len(part) < WORDS[0] or sum(1 for w in part if _WORD.fullmatch(w.strip(".,;:()\"'`"))) < 0.7 * len(part):
                        continue
                    text = " ".join(part)
                    if not text.isprintable():  # control characters (a NUL now and then) are not prose
                        continue
                    key = hashlib.blake2b(text.lower().encode(), digest_size=8).digest()
                    if key not in seen:
                        seen.add(key)
                        out.append(text)
                        if len(out) >= limit:
                            return out
        print(f"  {len(out):,} passages after {root}", file=sys.stderr, flush=True)
    return out


async def measure(kind: str, settings_kw: dict, texts: list[str], vectors: np.ndarray, query_texts: list[str],
                  queries: np.ndarray, exact: np.ndarray, embedder) -> dict:
    def say(what: str) -> None:
        print(f"  {kind} {len(texts):,}: {what}", file=sys.stderr, flush=True)

    registry = registry_for(kind, settings_kw, embedder)
    await registry.start()
    name = "real"
    start = time.perf_counter()
    for i in range(0, len(texts), 1000):
        await registry.add_precomputed(name, texts[i:i + 1000], vectors[i:i + 1000])
    load_s = time.perf_counter() - start
    adapter = getattr(getattr(registry, "inner", registry), "adapter", None)
    physical = (await registry.book(name)).live_version.physical if adapter is not None else name
    build_s = 0.0
    if hasattr(adapter, "build_hnsw"):
        say(f"loaded in {load_s:.0f} s; building the HNSW index")
        t0 = time.perf_counter()
        await asyncio.to_thread(adapter.build_hnsw, physical)
        build_s = time.perf_counter() - t0
    registry.settings.hybrid = False
    curve = []
    for ef in EF_CURVE:
        set_ef(registry, adapter, physical, ef)
        recall, took = await dense_recall(registry, name, texts, query_texts, queries, exact)
        curve.append({"ef_search": ef, "recall_at_10": recall, "dense_p50_ms": pct(took, 50),
                      "dense_p99_ms": pct(took, 99)})
        say(f"ef_search {ef}: recall@10 {curve[-1]['recall_at_10']:.3f}, dense p99 {pct(took, 99):.1f} ms")
    await registry.delete_index(name)
    await registry.close()
    return {"store": kind, "chunks": len(texts), "load_s": load_s, "hnsw_build_s": build_s, "ef_curve": curve}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=1_000_000, help="passages to index (fewer if the machine has fewer)")
    parser.add_argument("--stores", nargs="*", default=["faiss", "postgres"])
    parser.add_argument("--pg-shared-buffers", default="4GB")
    parser.add_argument("--keep", action="store_true", help="keep the rows of the results file this run does not measure")
    args = parser.parse_args()

    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings
    from ragengine.stores.postgres.store import PostgresStore  # noqa: F401  (imported before the long collection)
    from ragengine.versions import build_registry  # noqa: F401

    t0 = time.perf_counter()
    texts = passages(args.chunks + QUERIES)
    print(f"{len(texts):,} passages collected in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    rng = np.random.default_rng(3)
    held = set(rng.choice(len(texts), QUERIES, replace=False).tolist())
    query_texts = [t for i, t in enumerate(texts) if i in held]
    texts = [t for i, t in enumerate(texts) if i not in held]
    embedder = build_embedder(EngineSettings(embedding_model=MODEL))
    t0 = time.perf_counter()
    vectors = np.concatenate([np.asarray(embedder.embed_texts_sync(texts[i:i + 10_000]), dtype=np.float32)
                              for i in range(0, len(texts), 10_000)])
    queries = np.asarray(embedder.embed_texts_sync(query_texts), dtype=np.float32)
    print(f"embedded in {time.perf_counter() - t0:.0f} s ({vectors.shape[1]} dimensions)", file=sys.stderr, flush=True)
    exact = np.argsort(-(vectors @ queries.T), axis=0)[:10].T
    rows = []
    with postgres_server(settings={"shared_buffers": args.pg_shared_buffers}) as sa_url, \
            tempfile.TemporaryDirectory() as tmp:
        url = sa_url.replace("postgresql+psycopg://", "postgresql://")
        for kind in args.stores:
            kw: dict = {"embedding_model": MODEL, "data_dir": str(Path(tmp) / kind)}
            if kind == "postgres":
                kw.update(vector_store_url=url, vector_store_prefix="real", store_build_memory_mb=3072)
            rows.append(asyncio.run(measure(kind, kw, texts, vectors, query_texts, queries, exact, embedder)))
    embedder.close()
    if args.keep and OUT.exists():
        rows = [r for r in json.loads(OUT.read_text())["rows"] if r["store"] not in args.stores] + rows
    write_result(OUT, {"model": MODEL, "queries": QUERIES, "rows": rows}, indent=1)
    print("\n| store | chunks | HNSW build | " + " | ".join(f"ef_search {ef}: recall@10 / dense p99 (ms)"
                                                         for ef in EF_CURVE) + " |")
    print("|---|---|---|" + "---|" * len(EF_CURVE))
    for r in rows:
        build = f"{r['hnsw_build_s']:.0f} s" if r["hnsw_build_s"] else "-"
        print(f"| {r['store']} | {r['chunks']:,} | {build} | " + " | ".join(
            f"{c['recall_at_10']:.3f} / {c['dense_p99_ms']:.1f}" for c in r["ef_curve"]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

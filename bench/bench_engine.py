"""Engine benchmarks: ingestion vs the raw model, /retrieve latency, HNSW at scale, RSS, retrieval quality.

    .venv/bin/python bench/bench_engine.py            # default sizes (< 15 min on 2 cores)
    .venv/bin/python bench/bench_engine.py --quick    # small sizes (< 3 min)

Prints a table and writes bench/results/engine.json. Sections can be picked with --only.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from bench.engine.synth import SMALL_WORDS, clustered_unit_vectors, passages  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "engine.json"
FAQ = Path("/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz")


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def load_embedder():
    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings

    return build_embedder(EngineSettings())


# -- 1. ingestion -----------------------------------------------------------------------------------
def bench_ingest(emb, n: int) -> dict:
    """Engine POST /index (chunk + embed + journal fsync + FAISS + BM25) vs model.encode on the same chunks."""
    from ragengine.app import create_app
    from ragengine.index.chunking import Chunker
    from ragengine.index.types import ChunkingConfig
    from ragengine.settings import EngineSettings
    from tests.support.server import serve_app

    texts = passages(n, words=(60, 160), seed=5)  # 1-2 chunks each at the 254-token default
    chunker = Chunker(emb, ChunkingConfig())
    chunks = []
    for text in texts:
        for span in chunker.split(text, {}):
            chunks.append(span if isinstance(span, str) else text[span[0]:span[1]])
    bs = 64
    backend = emb.backend
    n_tokens = sum(min(len(emb.token_ids(c)) + 2, emb.max_tokens) for c in chunks)  # what the model sees

    def raw() -> float:  # the backend alone on exactly the chunks the engine will embed
        t = time.perf_counter()
        backend.embed_documents(chunks)
        return len(chunks) / (time.perf_counter() - t)

    backend.embed_documents(chunks[:bs])  # warm-up
    raw_runs, engine_runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        settings = EngineSettings(data_dir=Path(tmp), embedding_batch_size=bs)
        app = create_app(settings)
        app.state.embedder = emb
        with serve_app(app) as base, httpx.Client(base_url=base, timeout=600) as client:
            # Interleaved, best of two each: the machine is shared, so take each side's least-disturbed run.
            for run in range(2):
                raw_runs.append(raw())
                name = f"ingest-{run}"
                t = time.perf_counter()
                for start in range(0, n, 256):
                    r = client.post("/index", json={"index_name": name,
                                                    "documents": [{"text": x} for x in texts[start : start + 256]]})
                    r.raise_for_status()
                elapsed = time.perf_counter() - t
                stored = client.get("/health").json()["indexes"][name]["chunks"]
                assert stored == len(chunks), (stored, len(chunks))
                engine_runs.append(stored / elapsed)
    engine, raw_rate = max(engine_runs), max(raw_runs)
    out = {"documents": n, "chunks": len(chunks), "backend": backend.name, "engine_chunks_per_s": engine,
           "raw_model_chunks_per_s": raw_rate, "raw_runs": raw_runs, "engine_runs": engine_runs,
           "ratio": engine / raw_rate, "target_ratio": 0.9, "tokens": n_tokens,
           "engine_tokens_per_s": engine * n_tokens / len(chunks), "raw_tokens_per_s": raw_rate * n_tokens / len(chunks)}
    out.update(torch_and_threads(chunks, n_tokens, bs))
    out["vs_torch"] = out["engine_tokens_per_s"] / out["torch_fp32_tokens_per_s"]
    return out


def torch_and_threads(chunks: list[str], n_tokens: int, bs: int) -> dict:
    """The torch fp32 model's own tokens/s on the same chunks (sentence-transformers encode), and the ONNX
    backend at 1 thread and at every core, interleaved best of two (the machine is shared)."""
    from ragengine.embedding.core import resolve_model_path
    from ragengine.embedding.export import find_onnx
    from ragengine.embedding.torch_backend import TorchBackend
    from ragengine.settings import DEFAULT_EMBEDDING_MODEL

    runners = {"torch_fp32": TorchBackend(resolve_model_path(DEFAULT_EMBEDDING_MODEL), "cpu", None, bs, None)}
    found = find_onnx(DEFAULT_EMBEDDING_MODEL)
    if found:
        from ragengine.embedding.onnx_backend import OnnxBackend, cpu_threads

        for threads in sorted({1, cpu_threads()}):
            runners[f"onnx_{threads}_threads"] = OnnxBackend(found[0], found[1], bs, threads=threads)
    best: dict[str, float] = {}
    for runner in runners.values():
        runner.embed_documents(chunks[:bs])
    for _ in range(2):
        for name, runner in runners.items():
            t = time.perf_counter()
            runner.embed_documents(chunks)
            best[name] = max(best.get(name, 0.0), n_tokens / (time.perf_counter() - t))
    return {f"{name}_tokens_per_s": value for name, value in best.items()}


# -- 2. /retrieve latency and RSS -------------------------------------------------------------------
def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Server:
    def __init__(self, *args: str) -> None:
        from tests.support.server import free_port

        self.tmp = tempfile.mkdtemp(prefix="bench-engine-")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, str(ROOT / "bench/engine/serve_synthetic.py"), "--port", str(self.port),
               "--data-dir", self.tmp, *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.base_rss_mib = float("nan")
        for line in self.proc.stdout:  # type: ignore[union-attr]
            if line.startswith("BASE_RSS"):
                self.base_rss_mib = int(line.split()[1]) / 1024
            if line.startswith("READY"):
                break
        else:
            raise RuntimeError("benchmark server exited before READY")

    def rss_mib(self) -> float:
        return _rss_kib(self.proc.pid) / 1024

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def query_embed_ms(emb, queries: list[str]) -> float:
    times = []
    for q in queries:
        t = time.perf_counter()
        emb.backend.embed_queries([q])
        times.append((time.perf_counter() - t) * 1000)
    return pct(times, 50)


def _metric_sums(client: httpx.Client) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in client.get("/metrics").text.splitlines():
        for key in ('ragengine_embed_seconds_sum{kind="query"}', 'ragengine_embed_seconds_count{kind="query"}',
                    "ragengine_retrieve_seconds_sum", "ragengine_retrieve_seconds_count"):
            if line.startswith(key + " "):
                out[key.split("{")[0]] = float(line.split()[-1])
    return out


def bench_latency(server: Server, index: str, queries: list[str], rounds: int) -> dict:
    times = []
    with httpx.Client(base_url=server.base, timeout=30) as client:
        for q in queries[:20]:  # warm-up
            client.post("/retrieve", json={"index_name": index, "query": q, "max_node_count": 10})
        before = _metric_sums(client)
        for i in range(rounds):
            q = queries[i % len(queries)]
            t = time.perf_counter()
            r = client.post("/retrieve", json={"index_name": index, "query": q, "max_node_count": 10})
            times.append((time.perf_counter() - t) * 1000)
            assert r.status_code == 200 and r.json()["count"] == 10, r.text
        after = _metric_sums(client)
        health = client.get("/health").json()["indexes"][index]

    def mean_ms(name: str) -> float:
        count = after[name + "_count"] - before.get(name + "_count", 0)
        return 1000 * (after[name + "_sum"] - before.get(name + "_sum", 0)) / max(count, 1)

    return {"chunks": health["chunks"], "kind": health["kind"], "p50_ms": pct(times, 50), "p99_ms": pct(times, 99),
            "server_query_embed_mean_ms": mean_ms("ragengine_embed_seconds"),
            "server_retrieve_mean_ms": mean_ms("ragengine_retrieve_seconds")}


# -- 3. HNSW alone at scale -------------------------------------------------------------------------
def bench_hnsw(target: int, budget_s: float, m: int, ef_construction: int) -> dict:
    import faiss

    from ragengine.index.store import VectorStore

    xb = clustered_unit_vectors(target, seed=7)
    rng = np.random.default_rng(8)
    nq = 200
    xq = xb[rng.integers(0, target, nq)] + 0.05 * rng.standard_normal((nq, xb.shape[1])).astype(np.float32) / np.sqrt(384)
    xq /= np.linalg.norm(xq, axis=1, keepdims=True)
    store = VectorStore(384, hnsw_threshold=0, hnsw_m=m, ef_construction=ef_construction)
    index = store.build_hnsw(xb[:0])
    t0 = time.perf_counter()
    built = 0
    step = 50_000
    while built < target and time.perf_counter() - t0 < budget_s:
        index.add(xb[built : built + step])
        built = index.ntotal
    build_s = time.perf_counter() - t0
    flat = faiss.IndexFlatIP(384)
    flat.add(xb[:built])
    _, truth = flat.search(xq, 10)
    sweeps = []
    for ef in (32, 64, 128, 256):
        index.hnsw.efSearch = ef
        times, hits = [], 0
        for i in range(nq):
            t = time.perf_counter()
            _, ids = index.search(xq[i : i + 1], 10)
            times.append((time.perf_counter() - t) * 1000)
            hits += len(set(ids[0]) & set(truth[i]))
        sweeps.append({"ef_search": ef, "p50_ms": pct(times, 50), "p99_ms": pct(times, 99), "recall_at_10": hits / (nq * 10)})
    best = next((s for s in sweeps if s["recall_at_10"] >= 0.95), sweeps[-1])
    return {"target_vectors": target, "built_vectors": built, "build_s": build_s, "m": m,
            "ef_construction": ef_construction, "sweep": sweeps, "chosen": best}


# -- 4. retrieval quality on debian-faq -------------------------------------------------------------
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


# -- 5. the user's view: start-up, ingestion, /retrieve, peak RSS of one engine process ---------------
def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def bench_workload(backend: str, n: int, queries: list[str], rounds: int) -> dict:
    """A fresh engine process (``ragengine serve``, the given embedding backend): seconds from exec to the
    first 200 from /health, then ``n`` passages through POST /index (passages/s), /retrieve p50/p99 on
    them, and the process's peak RSS (VmHWM) over all of it."""
    from tests.support.server import free_port

    texts = passages(n, words=(60, 160), seed=5)
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "RAGENGINE_EMBEDDING_BACKEND": backend, "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "engine"), str(ROOT / "operator"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "ragengine.cli", "serve", "--port", str(port), "--data-dir", tmp],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=base, timeout=600) as client:
                while True:
                    if proc.poll() is not None:
                        raise RuntimeError(f"engine ({backend}) exited with {proc.returncode}")
                    try:
                        if client.get("/health", timeout=1).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.05)
                startup_s = time.perf_counter() - t0
                t = time.perf_counter()
                for start in range(0, n, 100):
                    client.post("/index", json={"index_name": "w", "documents": [{"text": x} for x in texts[start:start + 100]]}
                                ).raise_for_status()
                ingest_s = time.perf_counter() - t
                lat = []
                for i in range(rounds):
                    t = time.perf_counter()
                    client.post("/retrieve", json={"index_name": "w", "query": queries[i % len(queries)],
                                                   "max_node_count": 10}).raise_for_status()
                    lat.append((time.perf_counter() - t) * 1000)
                peak = _status_kib(proc.pid, "VmHWM") / 1024
        finally:
            proc.kill()
            proc.wait()
    return {"backend": backend, "passages": n, "startup_s": startup_s, "ingest_passages_per_s": n / ingest_s,
            "retrieve_p50_ms": pct(lat, 50), "retrieve_p99_ms": pct(lat, 99), "peak_rss_mib": peak}


# -- main -------------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", default=None, help="workload ingest latency hnsw quality")
    ap.add_argument("--rerank-model", default=os.environ.get("RAGENGINE_RERANK_MODEL"))
    args = ap.parse_args()
    q = args.quick
    sizes = {"ingest": 48 if q else 200, "small": 2_000 if q else 10_000, "large": 20_000 if q else 100_000,
             "hnsw": 100_000 if q else 1_000_000, "hnsw_budget": 25 if q else 240, "rounds": 100 if q else 300,
             "workload": 200 if q else 1000}
    want = set(args.only or ["workload", "ingest", "latency", "hnsw", "quality"])
    started = time.perf_counter()
    emb = load_embedder()
    results: dict = {"mode": "quick" if q else "default", "sizes": sizes, "machine": f"{os.cpu_count()} CPUs"}
    queries = [f"how does the {w} work with {v}?" for w, v in zip(passages(60, (1, 1), 9), passages(60, (2, 2), 10),
                                                                                 strict=True)]

    if "workload" in want:
        results["workload"] = {}
        for backend in ("onnx", "torch"):
            print(f"engine process ({backend}): start-up, {sizes['workload']} passages, /retrieve, peak RSS ...", flush=True)
            results["workload"][backend] = bench_workload(backend, sizes["workload"], queries, sizes["rounds"])
    if "ingest" in want:
        print("ingestion ...", flush=True)
        results["ingest"] = bench_ingest(emb, sizes["ingest"])
    if "latency" in want:
        results["query_embed_p50_ms"] = query_embed_ms(emb, queries)
        n_small, n_large = sizes["small"], sizes["large"]
        print(f"server with {n_small} embedded + {n_large} precomputed chunks ...", flush=True)
        srv = Server("--embed", str(n_small), "--precomputed", str(n_large))
        try:
            for label, n in (("small", n_small), ("large", n_large)):
                print(f"/retrieve at {n} chunks ...", flush=True)
                lat = bench_latency(srv, label, queries, sizes["rounds"])
                lat["loaded_by"] = ("POST path (chunk+embed)" if label == "small"
                                    else "precomputed vectors via registry.add_precomputed")
                lat["target_p50_ms"] = results["query_embed_p50_ms"] + 2
                results[f"retrieve_{label}"] = lat
            texts = passages(n_small, words=SMALL_WORDS, seed=3) + passages(n_large, seed=4)
            data_mib = ((n_small + n_large) * 384 * 4 + sum(len(t.encode()) for t in texts)) / 2**20
            rss, baseline_rss = srv.rss_mib(), srv.base_rss_mib
            results["rss"] = {"chunks": n_small + n_large, "rss_mib": rss, "baseline_rss_mib": baseline_rss,
                              "data_mib": data_mib, "delta_mib": rss - baseline_rss,
                              "delta_over_data": (rss - baseline_rss) / data_mib,
                              "total_over_data": rss / data_mib, "target": 1.3}
        finally:
            srv.close()
    if "hnsw" in want:
        print(f"HNSW alone, up to {sizes['hnsw']} vectors (budget {sizes['hnsw_budget']} s) ...", flush=True)
        results["hnsw"] = bench_hnsw(sizes["hnsw"], sizes["hnsw_budget"], m=32, ef_construction=80)
    if "quality" in want:
        print("quality on debian-faq ...", flush=True)
        results["quality"] = bench_quality(emb, args.rerank_model)
    results["elapsed_s"] = time.perf_counter() - started
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print_table(results)
    print(f"\nwrote {RESULTS.relative_to(ROOT)} in {results['elapsed_s']:.0f} s")
    return 0


def print_table(r: dict) -> None:
    rows = []
    for backend, w in r.get("workload", {}).items():
        rows.append((f"engine ({backend}): start-up to /health", f"{w['startup_s']:.2f} s", "target <= 8 s"))
        rows.append((f"engine ({backend}): ingestion, {w['passages']} passages",
                     f"{w['ingest_passages_per_s']:.1f} passages/s", ""))
        rows.append((f"engine ({backend}): /retrieve p50 / p99",
                     f"{w['retrieve_p50_ms']:.2f} / {w['retrieve_p99_ms']:.2f} ms", ""))
        rows.append((f"engine ({backend}): peak RSS", f"{w['peak_rss_mib']:.0f} MiB", "target <= 900 MiB"))
    if "ingest" in r:
        i = r["ingest"]
        rows.append((f"ingestion chunks/s (engine / raw {i.get('backend', 'model')})",
                     f"{i['engine_chunks_per_s']:.1f} / {i['raw_model_chunks_per_s']:.1f}",
                     f"ratio {i['ratio']:.2f} (target >= 0.9)"))
        if "torch_fp32_tokens_per_s" in i:
            threads = ", ".join(f"{k[:-len('_tokens_per_s')]} {v:.0f}" for k, v in i.items() if k.startswith("onnx_"))
            rows.append(("ingestion tokens/s: engine / torch fp32 model", f"{i['engine_tokens_per_s']:.0f} / "
                         f"{i['torch_fp32_tokens_per_s']:.0f}", f"x{i['vs_torch']:.2f} (target >= 1.5); raw: {threads}"))
    if "query_embed_p50_ms" in r:
        rows.append(("query embedding p50 (raw model)", f"{r['query_embed_p50_ms']:.2f} ms", ""))
    for label in ("small", "large"):
        if f"retrieve_{label}" in r:
            x = r[f"retrieve_{label}"]
            rows.append((f"/retrieve p50 / p99 @ {x['chunks']} chunks ({x['kind']})", f"{x['p50_ms']:.2f} / {x['p99_ms']:.2f} ms",
                         f"target p50 <= {x['target_p50_ms']:.2f} ms; in-server mean: embed "
                         f"{x['server_query_embed_mean_ms']:.2f}, whole retrieval {x['server_retrieve_mean_ms']:.2f} ms"))
    if "rss" in r:
        x = r["rss"]
        rows.append((f"RSS @ {x['chunks']} chunks: total / empty engine", f"{x['rss_mib']:.0f} / {x['baseline_rss_mib']:.0f} MiB",
                     f"data {x['data_mib']:.0f} MiB; (RSS-empty)/data {x['delta_over_data']:.2f}, "
                     f"RSS/data {x['total_over_data']:.2f} (target <= 1.3)"))
    if "hnsw" in r:
        h = r["hnsw"]
        c = h["chosen"]
        rows.append((f"HNSW alone @ {h['built_vectors']} vectors (M={h['m']}, efC={h['ef_construction']})",
                     f"p50 {c['p50_ms']:.3f} ms, recall@10 {c['recall_at_10']:.3f} (efSearch {c['ef_search']})",
                     f"built in {h['build_s']:.0f} s; target <= 5 ms, >= 0.95"))
    if "quality" in r and "dense" in r["quality"]:
        for mode in ("dense", "bm25", "hybrid", "hybrid+rerank"):
            x = r["quality"][mode]
            val = f"MRR@10 {x['mrr_at_10']:.3f}, Recall@10 {x['recall_at_10']:.3f}" if "mrr_at_10" in x else x.get("n/a", "n/a")
            rows.append((f"debian-faq {mode} ({r['quality']['questions']} questions)", val, ""))
    width = max(len(a) for a, _, _ in rows)
    print()
    for a, b, c in rows:
        print(f"{a:<{width}}  {b:<40} {c}")


if __name__ == "__main__":
    sys.exit(main())

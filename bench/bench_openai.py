"""OpenAI surface benchmark: what the vector store and Responses layers cost, through the official SDK.

Starts the fake vLLM (tests/llm_server, zero latency) and the engine (``ragengine serve``, real embedding
model, FAISS) as subprocesses (tests/support/engine_process.py), then, with the ``openai`` SDK:

- ingestion: ``vector_stores.files.upload_and_poll`` of ``--files`` text files (about 2 KB each), one after
  another: seconds per file from upload to ``completed`` (the file is embedded twice: once for the
  conversations index every upload goes to, once for the store);
- search: ``vector_stores.search`` latency (p50/p99), and the same query through ``POST /retrieve``;
- answers: ``responses.create`` with ``file_search`` against ``chat.completions.create`` with ``index_name``
  on the same index (p50/p99, concurrency 1), and streaming time to the first text delta for both.

The LLM answers at once, so the times are the engine's. Prints a table, writes bench/results/openai.json.
Usage: python -m bench.bench_openai [--files 20] [--requests 100] [--quick]
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import openai

from bench.common import RESULTS, ROOT, machine, pct, write_result
from tests.support.engine_process import engine_process

WORDS = ["pump", "valve", "boiler", "turbine", "pressure", "gasket", "seal", "bearing", "filter", "sensor", "alarm",
         "shift", "operator", "maintenance", "inspection", "torque", "coolant", "flow", "meter", "schedule"]


def document(rng: random.Random, n: int) -> str:
    sentences = [f"Procedure {n}.{i}: " + " ".join(rng.choices(WORDS, k=12)) + "." for i in range(25)]
    return " ".join(sentences)


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def first_delta_ms(stream_fn, is_delta) -> float:
    t = time.perf_counter()
    with stream_fn() as stream:
        for event in stream:
            if is_delta(event):
                ms = (time.perf_counter() - t) * 1000
                break
        for _ in stream:
            pass
    return ms


def summary(values: list[float]) -> dict:
    return {"p50_ms": round(statistics.median(values), 2), "p99_ms": round(pct(values, 99), 2)}


def run(args: argparse.Namespace) -> dict:
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="bench-openai-") as work, engine_process(Path(work)) as engine:
        c = openai.OpenAI(base_url=f"{engine.base_url}/v1", api_key="unused", max_retries=0, timeout=300)
        store = c.vector_stores.create(name="bench", extra_body={"index_name": "bench"})
        per_file = []
        for n in range(args.files):
            text = document(rng, n).encode()
            t = time.perf_counter()
            f = c.vector_stores.files.upload_and_poll(vector_store_id=store.id, file=(f"doc{n}.txt", io.BytesIO(text)),
                                                      poll_interval_ms=20)
            per_file.append(time.perf_counter() - t)
            assert f.status == "completed", f
        query = "what is the torque procedure for the turbine bearing?"
        tools = [{"type": "file_search", "vector_store_ids": [store.id]}]
        chat = {"model": "fake-llm", "messages": [{"role": "user", "content": query}]}
        # warm-up: first-use code paths, token caches
        c.vector_stores.search(store.id, query=query)
        c.responses.create(model="fake-llm", input=query, tools=tools, store=False)
        c.chat.completions.create(**chat, extra_body={"index_name": store.id})
        n = args.requests
        search = timed(lambda: c.vector_stores.search(store.id, query=query, max_num_results=10), n)
        with httpx.Client(base_url=engine.base_url, timeout=60) as http:  # one connection, as the SDK keeps one
            retrieve = timed(lambda: http.post("/retrieve", json={"index_name": store.id, "query": query,
                                                                  "max_node_count": 10}).raise_for_status(), n)
        responses = timed(lambda: c.responses.create(model="fake-llm", input=query, tools=tools, store=False), n)
        stored = timed(lambda: c.responses.create(model="fake-llm", input=query, tools=tools), n)
        completions = timed(lambda: c.chat.completions.create(**chat, extra_body={"index_name": store.id}), n)
        stream_n = max(5, n // 4)
        # the raw event streams (the SDK's responses.stream() helper adds its own accumulation per event)
        responses_ttft = [first_delta_ms(lambda: c.responses.create(model="fake-llm", input=query, tools=tools,
                                                                     store=False, stream=True),
                                         lambda e: e.type == "response.output_text.delta") for _ in range(stream_n)]
        chat_ttft = [first_delta_ms(lambda: c.chat.completions.create(**chat, stream=True,
                                                                      extra_body={"index_name": store.id}),
                                    lambda ch: bool(ch.choices and ch.choices[0].delta.content)) for _ in range(stream_n)]
    return {
        "machine": machine(),
        "files": args.files, "requests": n,
        "upload_and_poll_s": {"p50": round(statistics.median(per_file), 3), "max": round(max(per_file), 3)},
        "vector_stores.search": summary(search), "POST /retrieve": summary(retrieve),
        "responses.create (file_search, store=false)": summary(responses),
        "responses.create (file_search, stored)": summary(stored),
        "chat.completions.create (index_name)": summary(completions),
        "responses stream, first delta": summary(responses_ttft),
        "chat stream, first delta": summary(chat_ttft),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="5 files, 20 requests")
    args = parser.parse_args()
    if args.quick:
        args.files, args.requests = 5, 20
    result = run(args)
    print(f"{result['machine']}; {result['files']} files, {result['requests']} requests per row")
    print(f"upload_and_poll: p50 {result['upload_and_poll_s']['p50']} s per file, max {result['upload_and_poll_s']['max']} s")
    print(f"{'call':48} {'p50 ms':>8} {'p99 ms':>8}")
    for key, value in result.items():
        if isinstance(value, dict) and "p50_ms" in value:
            print(f"{key:48} {value['p50_ms']:8.2f} {value['p99_ms']:8.2f}")
    out = RESULTS / "openai.json"
    write_result(out, result)
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

"""Parsing an upstream chat stream: httpx ``aiter_lines`` (the engine's LLMStream) vs ``httpx-sse``.

Issue 12 asks to adopt httpx-sse only if it makes the code shorter and no slower. Run:
``.venv/bin/python -m bench.bench_sse_parse`` (about 5 s); prints µs per event for each parser.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import httpx
from httpx_sse import EventSource

N = 20_000
RUNS = 5
CHUNK = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": {"content": " word"}, "finish_reason": None}]}
RAW = ("".join(f"data: {json.dumps(CHUNK)}\n\n" for _ in range(N)) + "data: [DONE]\n\n").encode()


async def _body():
    for i in range(0, len(RAW), 4096):  # network-sized pieces, events split across them
        yield RAW[i:i + 4096]


def _handler(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=_body())


async def by_lines(client: httpx.AsyncClient) -> int:
    n = 0
    async with client.stream("GET", "http://llm/") as r:
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            json.loads(data)
            n += 1
    return n


async def by_httpx_sse(client: httpx.AsyncClient) -> int:
    n = 0
    async with client.stream("GET", "http://llm/") as r:
        async for sse in EventSource(r).aiter_sse():
            if sse.data == "[DONE]":
                break
            json.loads(sse.data)
            n += 1
    return n


async def main() -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(_handler))
    times: dict[str, list[float]] = {"aiter_lines": [], "httpx-sse": []}
    for _ in range(RUNS):
        for name, parse in (("aiter_lines", by_lines), ("httpx-sse", by_httpx_sse)):
            start = time.perf_counter()
            assert await parse(client) == N
            times[name].append(time.perf_counter() - start)
    print(f"| parser | µs per event (median of {RUNS} runs, {N} events) |\n|---|---|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values) * 1e6 / N:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())

"""The engine's HTTP client to the LLM (llm/http.py) against real sockets: how a stream's lines are cut, and
which failure the fallback chain is told about (a refused connection is not a time-out: it is retried)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from ragengine.llm import http
from ragengine.llm.client import LLMClient, LLMUnavailable
from ragengine.settings import EngineSettings
from tests.support.server import refused_port
from tests.support.stores import ON_FAISS

pytestmark = ON_FAISS


@contextlib.contextmanager
def scripted(pieces: list[bytes], pause_s: float = 0.05) -> Iterator[tuple[str, dict]]:
    """A server that answers each connection with a chunked 200 written piece by piece, ``pause_s`` apart (one
    read each on the client's side), then ends the body. Yields its base URL and what it saw: ``closed_early``
    is set when the client hung up before the last piece."""
    seen: dict = {"closed_early": threading.Event()}
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def answer(conn: socket.socket) -> None:
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            seen["request_line"] = head.split(b"\r\n")[0].decode()
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                body += conn.recv(65536)
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
                for piece in pieces:
                    time.sleep(pause_s)
                    conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                conn.sendall(b"0\r\n\r\n")
            except OSError:
                seen["closed_early"].set()

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", seen
    finally:
        listener.close()


async def test_lines_are_whole_across_reads_whatever_their_length_and_ending():
    long = "x" * 200_000  # over aiohttp's own readline limit (64 KiB)
    pieces = [b"data: {\"a\": 1}\r\n\r\nda", b"ta: caf\xc3", b"\xa9\n\n", f"data: {long}\n".encode(), b"data: last"]
    client = http.LLMHttp({}, 30, 5)
    try:
        with scripted(pieces) as (base, _):
            response = await client.send("POST", f"{base}/v1/chat/completions", body={"stream": True})
            got = [line async for line in http.lines(response)]
            http.close(response)
    finally:
        await client.aclose()
    assert got == ['data: {"a": 1}', "", "data: café", "", f"data: {long}", "data: last"]


async def test_closing_an_unread_stream_hangs_up_on_the_upstream():
    """vLLM stops generating when its client goes away: an answer abandoned half way must close the connection,
    not wait for the rest."""
    client = http.LLMHttp({}, 30, 5)
    try:
        with scripted([b"data: 1\n\n"] * 40, pause_s=0.05) as (base, seen):
            response = await client.send("POST", f"{base}/v1/chat/completions", body={"stream": True})
            async for _ in http.lines(response):
                break
            http.close(response)
            hung_up = await asyncio.to_thread(seen["closed_early"].wait, 10)  # the loop runs on: it closes the socket
            assert hung_up, "the server wrote the whole answer: the connection stayed open"
    finally:
        await client.aclose()


async def test_a_refused_connection_is_a_connect_failure_and_a_silent_one_a_time_out():
    client = http.LLMHttp({}, 0.5, 5)
    try:
        with refused_port() as port, pytest.raises(http.ConnectFailed):
            await client.send("POST", f"http://127.0.0.1:{port}/v1/chat/completions", body={})
        with scripted([b"data: 1\n\n"], pause_s=3) as (base, _), pytest.raises(http.TimedOut):
            response = await client.send("POST", f"{base}/v1/chat/completions", body={})
            await http.read_body(response)
    finally:
        await client.aclose()


async def test_the_environments_proxy_is_used_unless_no_proxy_exempts_the_host(monkeypatch):
    """As httpx did (trust_env): HTTP_PROXY carries the call, NO_PROXY lets a host be reached directly."""
    with scripted([b"{}"]) as (proxy, seen):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.setenv("NO_PROXY", "direct.invalid")
        client = http.LLMHttp({}, 5, 5)
        try:
            response = await client.send("POST", "http://llm.invalid:8000/v1/chat/completions", body={})
            assert await http.read_body(response) == b"{}"
            assert seen["request_line"] == "POST http://llm.invalid:8000/v1/chat/completions HTTP/1.1"
            with pytest.raises(http.ConnectFailed):  # not through the proxy: the name does not resolve
                await client.send("POST", "http://direct.invalid:8000/v1/chat/completions", body={})
        finally:
            await client.aclose()


async def test_the_chain_retries_a_refused_connection_and_says_it_could_not_connect():
    with refused_port() as port:
        llm = LLMClient(EngineSettings(llm_url=f"http://127.0.0.1:{port}/v1", llm_retries=2, llm_model="m"))
        try:
            with pytest.raises(LLMUnavailable) as refused:
                await llm.chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        finally:
            await llm.aclose()
    assert refused.value.status_code == 502
    assert "cannot connect (ClientConnectorError)" in str(refused.value), str(refused.value)

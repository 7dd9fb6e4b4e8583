"""Token counting: the server's tokenizer (vLLM or llama.cpp), a local one, or the documented estimate.

The servers are real HTTP servers on loopback, each answering through a small handler function (an
``httpx.Request`` in, an ``httpx.Response`` out), asked through the engine's own LLM client (llm/http.py)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from ragengine.llm.http import LLMHttp
from ragengine.llm.tokens import MESSAGE_OVERHEAD_TOKENS, TokenCounter, estimate_tokens
from tests.chat.conftest import tokens
from tests.support.stores import ON_FAISS

# Fake indexes or none: nothing here depends on the store.
pytestmark = ON_FAISS

Handler = Callable[[httpx.Request], httpx.Response]


@contextlib.contextmanager
def serving(handler: Handler) -> Iterator[str]:
    """``handler`` answering POSTs on a free loopback port (its base URL); a handler that raises makes the
    server drop the connection without an answer."""

    class Answer(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                response = handler(httpx.Request("POST", f"http://llm{self.path}", content=body))
            except Exception:
                self.close_connection = True
                return
            self.send_response(response.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(response.content)))
            self.end_headers()
            self.wfile.write(response.content)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
async def counter():
    """``counter(handler, local=None)``: a TokenCounter asking a server that answers with ``handler``, and the
    list of (path, body) that server received."""
    clients: list[LLMHttp] = []
    with contextlib.ExitStack() as servers:
        def make(handler: Handler, local: str | None = None) -> tuple[TokenCounter, list]:
            calls: list = []

            def wrapped(request: httpx.Request) -> httpx.Response:
                calls.append((request.url.path, request.content))
                return handler(request)

            clients.append(LLMHttp({}, 30, 5))

            async def model_name():
                return "m"

            return TokenCounter(clients[-1], [servers.enter_context(serving(wrapped))], model_name, local), calls

        yield make
        for client in clients:
            await client.aclose()


def vllm(request: httpx.Request) -> httpx.Response:
    import json

    body = json.loads(request.content)
    if request.url.path != "/tokenize":
        return httpx.Response(404)
    n = 100 + len(body["messages"]) if "messages" in body else len(body["prompt"].split())
    return httpx.Response(200, json={"count": n, "max_model_len": 4096, "tokens": list(range(n))})


def llama_cpp(request: httpx.Request) -> httpx.Response:
    import json

    if request.url.path != "/extras/tokenize/count":
        return httpx.Response(404, json={"detail": "Not Found"})
    return httpx.Response(200, json={"count": len(json.loads(request.content)["input"].split()) * 2})


async def test_vllm_tokenize_and_cache(counter):
    tc, calls = counter(vllm)
    assert await tc.count("a b c") == 3 and tc.method == "vllm"
    assert await tc.count("a b c") == 3 and len(calls) == 1  # cached
    assert await tc.count([{"role": "user", "content": "x"}]) == 101  # the server's chat template count
    assert await tc.count_many(["a", "a b", "a"]) == [1, 2, 1]


async def test_llama_cpp_count_endpoint(counter):
    tc, _ = counter(llama_cpp)
    assert await tc.count("a b c") == 6 and tc.method == "llama.cpp"
    msgs = [{"role": "system", "content": "s t"}, {"role": "user", "content": [{"type": "text", "text": "u"}]}]
    assert await tc.count(msgs) == 4 + 2 + 2 * MESSAGE_OVERHEAD_TOKENS


async def test_no_tokenize_endpoint_uses_local_tokenizer(tmp_path, counter):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tok = Tokenizer(WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    tc, _ = counter(lambda r: httpx.Response(404), local=str(path))
    assert await tc.count("hello big world!") == 4 and tc.method == "local"


async def test_estimate_when_nothing_else(counter):
    tc, _ = counter(lambda r: httpx.Response(404))
    text = "The quick brown fox jumps over the lazy dog."
    assert await tc.count(text) == estimate_tokens(text) == 15 and tc.method == "estimate"


async def test_unreachable_server_is_not_asked_on_every_call(counter):
    def down(request):
        raise ConnectionResetError("the server drops the connection")

    tc, calls = counter(down)
    assert await tc.count("a b") == estimate_tokens("a b")
    n = len(calls)
    assert await tc.count("c d") == estimate_tokens("c d") and len(calls) == n  # cooling down


@pytest.mark.parametrize("text, expected", [("", 0), ("abc", 1), ("abcd", 2), ("é" * 3, 2)])
def test_estimate_is_bytes_over_three(text, expected):
    assert estimate_tokens(text) == expected


# --- counts keyed by the served model, shared between concurrent requests -------------------------
def tokenize_calls(llm) -> list[dict]:
    return [r["body"] for r in llm.requests if r["path"] == "/tokenize"]


async def test_concurrent_requests_share_one_call_per_text(llm_server, fake_llm):
    """16 requests needing the same 20 uncounted chunks: each text goes to /tokenize once, not 16 times."""
    _, base = llm_server
    http = LLMHttp({}, 30, 5)
    try:
        async def model_name():
            return fake_llm.model

        tc = TokenCounter(http, [base], model_name)
        texts = [f"chunk {i} says , something ; else" for i in range(20)]
        results = await asyncio.gather(*(tc.count_many(texts + texts[:3]) for _ in range(16)))
        assert all(r == [tokens(t) for t in texts + texts[:3]] for r in results)
        assert sorted(c["prompt"] for c in tokenize_calls(fake_llm)) == sorted(texts)
        fake_llm.reset()
        assert await tc.count_many(texts) == [tokens(t) for t in texts]
        assert tokenize_calls(fake_llm) == []  # known counts: no round trip
    finally:
        await http.aclose()


async def test_counts_follow_the_served_model():
    """A count made for one model is not reused for another: the cache key holds the model's identity."""
    import json

    served = {"name": "small"}

    def per_model(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        n = len(body["prompt"].split()) * (1 if body["model"] == "small" else 3)
        return httpx.Response(200, json={"count": n, "max_model_len": 4096, "tokens": list(range(n))})

    calls: list = []

    def handler(request):
        calls.append(request)
        return per_model(request)

    async def model_name():
        return served["name"]

    http = LLMHttp({}, 30, 5)
    with serving(handler) as base:
        tc = TokenCounter(http, [base], model_name)
        assert await tc.count_many(["a b", "c d e"]) == [2, 3]
        served["name"] = "big"
        assert await tc.count_many(["a b", "c d e"]) == [6, 9]
        n = len(calls)
        served["name"] = "small"  # back again: the first model's counts are still known
        assert await tc.count_many(["a b", "c d e"]) == [2, 3] and len(calls) == n
    await http.aclose()


def test_budget_holds_with_counts_far_above_the_estimate(engine, fake_llm):
    """Punctuation-dense chunks: the served model's tokenizer counts ~2.5x the bytes/3 estimate. The
    chosen context, prompt and max_tokens still fit the window by the server's own count, and a repeat
    of the request asks the tokenizer nothing (counts known)."""
    from tests.chat.conftest import FakeRegistry, node
    from tests.llm_server import count_message_tokens

    dense = [",".join(f"{chr(97 + (i + j) % 26)}" for j in range(20)) for i in range(30)]
    assert all(tokens(t) > 2 * estimate_tokens(t) for t in dense)
    fake_llm.max_model_len = 1000
    base = engine(FakeRegistry({"docs": [node(f"d{i}", t, 0.9 - i / 100) for i, t in enumerate(dense)]}))
    body = {"index_name": "docs", "messages": [{"role": "user", "content": "Which letters?"}]}
    r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    sent = fake_llm.last_chat()
    rag = r.json()["rag"]
    assert rag["token_counter"] == "vllm" and 0 < rag["selected"] < len(dense)
    assert sum(estimate_tokens(t) for t in dense) < rag["context_budget"]  # the estimate would take them all
    assert count_message_tokens(sent["messages"]) <= fake_llm.max_model_len
    assert rag["context_tokens"] <= rag["context_budget"]
    fake_llm.reset()
    r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200 and tokenize_calls(fake_llm) == []


# --- a local tokenizer of the served model: no round trip (issue 45) ------------------------------
async def test_a_local_tokenizer_is_used_before_the_servers_endpoint(tmp_path, counter):
    """With ``llm_tokenizer`` set, texts and conversations are counted locally although the server has
    /tokenize: no request leaves the engine. A text longer than INLINE_CHARS counts the same (off the loop)."""
    from ragengine.llm.tokens import INLINE_CHARS
    from tests.llm_server import write_tokenizer

    tc, calls = counter(vllm, local=str(write_tokenizer(tmp_path / "tokenizer.json")))
    assert await tc.count("How are you, Ann?") == tokens("How are you, Ann?") and tc.method == "local"
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}]
    assert await tc.count(messages) == tokens("Be brief.") + tokens("Why?") + 2 * MESSAGE_OVERHEAD_TOKENS
    long = "word, " * (INLINE_CHARS // 3)
    assert await tc.count_many([long, "a b"]) == [tokens(long), 2]
    assert calls == [] and tc.identity == "local:m"


def test_chat_turns_ask_no_tokenize_with_a_local_tokenizer(engine, fake_llm, tmp_path_factory):
    """A RAG chat turn of an engine given the served model's tokenizer counts its prompt, query and chunks
    locally (before: two /tokenize round trips per new question), and the counts match the server's."""
    from tests.llm_server import write_tokenizer

    path = write_tokenizer(tmp_path_factory.mktemp("tokenizer") / "tokenizer.json")
    base = engine(llm_tokenizer=str(path))
    body = {"index_name": "docs", "messages": [{"role": "user", "content": "What does KAITO provision, exactly?"}]}
    r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    rag = r.json()["rag"]
    assert rag["token_counter"] == "local" and rag["selected"] > 0
    assert rag["context_tokens"] == sum(tokens(n["text"]) for n in r.json()["source_nodes"])
    assert tokenize_calls(fake_llm) == [] and len(fake_llm.chat_requests()) == 1

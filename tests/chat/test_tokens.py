"""Token counting: the server's tokenizer (vLLM or llama.cpp), a local one, or the documented estimate."""

from __future__ import annotations

import httpx
import pytest

from ragengine.llm.tokens import MESSAGE_OVERHEAD_TOKENS, TokenCounter, estimate_tokens


def counter(handler, local=None, roots=("http://llm",)) -> tuple[TokenCounter, list]:
    calls: list = []

    def wrapped(request: httpx.Request) -> httpx.Response:
        calls.append((request.url.path, request.content))
        return handler(request)

    http = httpx.AsyncClient(transport=httpx.MockTransport(wrapped))

    async def model_name():
        return "m"

    return TokenCounter(http, list(roots), model_name, local), calls


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


async def test_vllm_tokenize_and_cache():
    tc, calls = counter(vllm)
    assert await tc.count("a b c") == 3 and tc.method == "vllm"
    assert await tc.count("a b c") == 3 and len(calls) == 1  # cached
    assert await tc.count([{"role": "user", "content": "x"}]) == 101  # the server's chat template count
    assert await tc.count_many(["a", "a b", "a"]) == [1, 2, 1]


async def test_llama_cpp_count_endpoint():
    tc, _ = counter(llama_cpp)
    assert await tc.count("a b c") == 6 and tc.method == "llama.cpp"
    msgs = [{"role": "system", "content": "s t"}, {"role": "user", "content": [{"type": "text", "text": "u"}]}]
    assert await tc.count(msgs) == 4 + 2 + 2 * MESSAGE_OVERHEAD_TOKENS


async def test_no_tokenize_endpoint_uses_local_tokenizer(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tok = Tokenizer(WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    tc, _ = counter(lambda r: httpx.Response(404), local=str(path))
    assert await tc.count("hello big world!") == 4 and tc.method == "local"


async def test_estimate_when_nothing_else():
    tc, _ = counter(lambda r: httpx.Response(404))
    text = "The quick brown fox jumps over the lazy dog."
    assert await tc.count(text) == estimate_tokens(text) == 15 and tc.method == "estimate"


async def test_unreachable_server_is_not_asked_on_every_call():
    def down(request):
        raise httpx.ConnectError("refused")

    tc, calls = counter(down)
    assert await tc.count("a b") == estimate_tokens("a b")
    n = len(calls)
    assert await tc.count("c d") == estimate_tokens("c d") and len(calls) == n  # cooling down


@pytest.mark.parametrize("text, expected", [("", 0), ("abc", 1), ("abcd", 2), ("é" * 3, 2)])
def test_estimate_is_bytes_over_three(text, expected):
    assert estimate_tokens(text) == expected

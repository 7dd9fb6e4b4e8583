"""Token counts in the served model's own tokenizer.

Sources, best first:
1. A local tokenizer of the served model (``settings.llm_tokenizer``: a .gguf file read vocab-only by
   llama-cpp, a tokenizer.json, or a Hugging Face directory): the same counts without a round trip to the
   server (two per chat turn before: the prompt and the query, about 1 ms of the engine's CPU each). A
   conversation's count is its texts' plus ``MESSAGE_OVERHEAD_TOKENS`` per message (the chat template's
   markers, which only the server knows exactly; the budget keeps 150 tokens aside for them). Texts of more
   than ``INLINE_CHARS`` characters are counted in a worker thread, not on the event loop.
2. The inference server: vLLM's ``POST /tokenize`` (``{"count", "max_model_len", "tokens"}``), or
   llama-cpp-python's ``POST /extras/tokenize/count``. Probed once, then remembered.
3. An estimate: ``ceil(utf8_bytes / 3)`` per text. BPE vocabularies of current models average about
   4 bytes per token on English prose and 3 on code, so this over-counts ordinary text (budgets come
   out smaller, never overflowing the window); it can under-count only unusual input (long digit runs,
   rare scripts), and then the LLM's own length check still answers with its 400.

Exact counts are cached under (the served model's identity, the text's hash): chunk texts repeat across
requests, so after a chunk's first use its count costs nothing, and a request whose chunks are known makes
no tokenizer call for them. When the served model changes (another name from discovery, or a rollout to a
different model behind the same URL, see ``model_changed``) the old counts no longer match any key and
are counted again. Concurrent requests that need the same uncounted text share one call (single flight),
and the texts one request needs are counted concurrently, never one after another. Estimates are not
cached, so a server that comes back is used again.

Chunk counts are also stored with the chunks (``exact_counts`` at ingestion, under ``identity``: the
counting source and served model), so a request over stored chunks counts only its prompt even on a fresh
replica; ``count_with_stored`` uses a stored count only when its key is the current identity.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ragengine.llm.http import LLMHttp, TransportFailed, read_body, read_json, read_text

log = logging.getLogger(__name__)

# Chat templates add role markers per message; without the server's template we add this many.
MESSAGE_OVERHEAD_TOKENS = 4
CACHE_SIZE = 200_000
_CONCURRENCY = 16
# After the server could not be reached, count locally for this long instead of paying a connect
# attempt (or a connect timeout) on every request.
UNREACHABLE_COOLDOWN_S = 10.0
# A local count of a longer text (or of several texts together) runs in a worker thread: about 1 ms per
# 20,000 characters with a fast tokenizer, which the event loop should not wait for.
INLINE_CHARS = 20_000


def estimate_tokens(text: str) -> int:
    """The documented conservative estimate (see module docstring)."""
    return math.ceil(len(text.encode("utf-8")) / 3) if text else 0


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _load_local(path: str) -> Callable[[str], int]:
    if path.endswith(".gguf"):
        import llama_cpp

        vocab = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        return lambda text: len(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False))
    if path.endswith(".json"):
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(path)
        return lambda text: len(tok.encode(text, add_special_tokens=False).ids)
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return lambda text: len(hf.encode(text, add_special_tokens=False))


class TokenCounter:
    """Counts tokens against the first endpoint that can, with a text cache."""

    def __init__(
        self,
        http: LLMHttp,
        roots: list[str],
        model_name: Callable[[], Awaitable[str | None]],
        local_tokenizer: str | None = None,
    ) -> None:
        self._http = http
        self._roots = roots  # server roots (base URL without /v1)
        self._model_name = model_name
        self._local_path = local_tokenizer
        self._local: Callable[[str], int] | None = None
        self._cache: OrderedDict[tuple[str, int, int], int] = OrderedDict()
        self._inflight: dict[tuple[str, int, int], asyncio.Future[int]] = {}
        self._served = "?"  # the served model's name, refreshed on every count
        self._remote_kind: str | None = None  # "vllm" | "llama.cpp" | "none", decided on first use
        self._probe_lock = asyncio.Lock()
        self._sem = asyncio.Semaphore(_CONCURRENCY)
        self._skip_remote_until = 0.0
        self.last_method = "estimate"

    @property
    def method(self) -> str:
        if self._local_counter() is not None:
            return "local"
        if self._remote_kind in ("vllm", "llama.cpp"):
            return self._remote_kind
        return "estimate"

    # --- public -----------------------------------------------------------------------------------
    def cached(self, text: str) -> int | None:
        """The known count of ``text`` for the current model, or None (no I/O)."""
        key = self._key(text)
        value = self._cache.get(key)
        if value is not None:
            self._cache.move_to_end(key)
        return value

    async def count(self, text_or_messages: str | list[dict[str, Any]]) -> int:
        if isinstance(text_or_messages, str):
            return (await self.count_many([text_or_messages]))[0]
        await self._refresh_identity()
        return await self._count_messages(text_or_messages)

    async def count_many(self, texts: Iterable[str]) -> list[int]:
        """Counts of ``texts`` in order: cached ones without I/O, the others in one concurrent round
        (duplicates and texts another request is counting right now share that call)."""
        texts = list(texts)
        await self._refresh_identity()
        out: list[int | None] = [self.cached(t) for t in texts]
        missing: dict[str, list[int]] = {}
        for i, value in enumerate(out):
            if value is None:
                missing.setdefault(texts[i], []).append(i)
        if missing:
            counted = (await self._count_local(list(missing)) if self._local_counter() is not None
                       else await asyncio.gather(*(self._count_shared(text) for text in missing)))
            for positions, value in zip(missing.values(), counted, strict=True):
                for i in positions:
                    out[i] = value
        return out  # type: ignore[return-value]

    @property
    def identity(self) -> str:
        """What the counts are valid for: the counting source and the served model (as of the last count)."""
        return f"{self.method}:{self._served}"

    async def exact_counts(self, texts: list[str]) -> tuple[str, list[int]] | None:
        """Counts of ``texts`` worth storing with the chunks: (``identity``, counts), or None when any of
        them could only be estimated (an estimate is never stored: a server that comes back counts again)."""
        counts = await self.count_many(texts)
        if self.method == "estimate" or any(text and self.cached(text) is None for text in texts):
            return None
        return self.identity, counts

    async def count_with_stored(self, texts: list[str], stored: list[dict[str, int] | None]) -> list[int]:
        """Counts of ``texts``, taking each from ``stored`` (the chunk's counts by identity) when it holds one
        for the current identity; only the others are counted. Call after the prompt is counted, so the
        tokenizer's kind is known and the identity is the one counting would use."""
        await self._refresh_identity()
        identity = self.identity
        known = [counts.get(identity) if counts else None for counts in stored]
        missing = [text for text, value in zip(texts, known, strict=True) if value is None]
        counted = iter(await self.count_many(missing) if missing else [])
        return [value if value is not None else next(counted) for value in known]

    def model_changed(self) -> None:
        """Forget the remote tokenizer kind: the next count probes again and keys by the new identity."""
        self._remote_kind = None
        self._skip_remote_until = 0.0

    # --- internals --------------------------------------------------------------------------------
    async def _refresh_identity(self) -> None:
        try:
            name = await self._model_name()
        except Exception:  # discovery failing must not break counting
            name = None
        self._served = name or "?"

    def _key(self, text: str, method: str | None = None) -> tuple[str, int, int]:
        """(counting source and served model, text): the model's identity, then the text's hash."""
        return (f"{method or self.method}:{self._served}", len(text), hash(text))

    def _remember(self, text: str, value: int, method: str) -> int:
        self._cache[self._key(text, method)] = value
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return value

    async def _count_shared(self, text: str) -> int:
        key = self._key(text)
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            value = await self._count_text(text)
        except BaseException as exc:
            future.set_exception(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        finally:
            self._inflight.pop(key, None)
        future.set_result(value)
        return value

    async def _count_local(self, texts: list[str]) -> list[int]:
        """Counts of ``texts`` by the local tokenizer, remembered; in a worker thread when they are long."""
        local = self._local_counter()
        assert local is not None
        self.last_method = "local"

        def count_all() -> list[int]:
            return [local(text) if text else 0 for text in texts]

        long = sum(len(text) for text in texts) > INLINE_CHARS
        counts = await asyncio.to_thread(count_all) if long else count_all()
        for text, value in zip(texts, counts, strict=True):  # the cache is the event loop's alone
            if text:
                self._remember(text, value, "local")
        return counts

    async def _count_text(self, text: str) -> int:
        if not text:
            return 0
        value = await self._remote(text=text)
        if value is not None:
            return self._remember(text, value, self.method)
        local = self._local_counter()
        if local is not None:
            self.last_method = "local"
            return self._remember(text, local(text), "local")
        self.last_method = "estimate"
        return estimate_tokens(text)

    async def _count_messages(self, messages: list[dict[str, Any]]) -> int:
        key_text = json.dumps(messages, sort_keys=True, default=str)
        cached = self.cached(key_text)
        if cached is not None:
            return cached
        if self._local_counter() is None and self._remote_kind in (None, "vllm"):
            value = await self._remote(messages=messages)
            if value is not None and self._remote_kind == "vllm":
                return self._remember(key_text, value, "vllm")
        counts = await self.count_many([message_text(m) for m in messages])
        total = sum(counts) + MESSAGE_OVERHEAD_TOKENS * len(messages)
        return self._remember(key_text, total, self.last_method) if self.last_method != "estimate" else total

    def _local_counter(self) -> Callable[[str], int] | None:
        if self._local is None and self._local_path:
            try:
                self._local = _load_local(self._local_path)
            except Exception as exc:  # a broken path must not break chat: the server counts, or the estimate
                log.warning("local tokenizer %s unusable (%s); counting with the inference server's tokenizer or "
                            "estimating", self._local_path, exc)
                self._local_path = None
        return self._local

    async def _remote(self, *, text: str | None = None, messages: list | None = None) -> int | None:
        if not self._roots or self._remote_kind == "none" or time.monotonic() < self._skip_remote_until:
            return None
        if self._remote_kind is None:
            async with self._probe_lock:
                if self._remote_kind is None:
                    return await self._probe(text=text, messages=messages)
            if self._remote_kind in (None, "none"):  # another request's probe found nothing usable
                return None
        if self._remote_kind == "llama.cpp" and messages is not None:
            return None
        async with self._sem:
            return await self._ask(self._remote_kind, text=text, messages=messages)

    async def _probe(self, *, text: str | None, messages: list | None) -> int | None:
        for kind in ("vllm", "llama.cpp"):
            if kind == "llama.cpp" and messages is not None:
                text, messages = "probe", None
            try:
                value = await self._ask(kind, text=text, messages=messages, probing=True)
            except _NotSupported:
                continue
            if value is None:  # unreachable: decide later
                return None
            self._remote_kind = kind
            log.info("token counts come from the inference server (%s tokenize endpoint)", kind)
            return value if (messages is not None or text != "probe") else None
        self._remote_kind = "none"
        log.info("inference server has no tokenize endpoint; counting with %s", self.method)
        return None

    async def _ask(self, kind: str, *, text: str | None, messages: list | None, probing: bool = False) -> int | None:
        for root in self._roots:
            try:
                if kind == "vllm":
                    body: dict[str, Any] = {"model": await self._model_name()}
                    if messages is not None:
                        body.update(messages=messages, add_generation_prompt=True)
                    else:
                        body.update(prompt=text, add_special_tokens=False)
                    data = await self._post(f"{root}/tokenize", body, probing)
                    self.last_method = "vllm"
                    return int(data["count"]) if "count" in data else len(data["tokens"])
                data = await self._post(f"{root}/extras/tokenize/count", {"input": text}, probing)
                self.last_method = "llama.cpp"
                return int(data["count"])
            except _NotSupported:
                raise
            except (TransportFailed, ValueError, KeyError, TypeError) as exc:
                log.debug("tokenize at %s failed: %s", root, exc)
                continue
        self._skip_remote_until = time.monotonic() + UNREACHABLE_COOLDOWN_S
        return None

    async def _post(self, url: str, body: dict[str, Any], probing: bool) -> Any:
        """The endpoint's JSON answer; _NotSupported for a 404/405 while probing, ValueError for another error."""
        resp = await self._http.send("POST", url, body=body)
        if resp.status in (404, 405) and probing:
            await read_body(resp)
            raise _NotSupported
        if resp.status >= 400:
            raise ValueError(f"HTTP {resp.status}: {await read_text(resp)}")
        return await read_json(resp)


class _NotSupported(Exception):
    pass

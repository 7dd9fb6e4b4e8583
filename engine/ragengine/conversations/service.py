"""A session message, end to end, as a stream of progress events.

history → optional reformulation → retrieval scoped to the session's files (a structured ``in``
filter on ``file_id``) or the tool-calling loop → context selection within the token budget (files
still being ingested go in inline) → the LLM with its fallback chain, or the extractive answer →
groundedness → both messages persisted. ``run`` yields event dicts (see ``events.py``); the JSON
endpoint drains it and returns the last one. The user message is stored before any LLM work, so a
failed generation still leaves the question in the history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from ragengine.access.acl import Acl
from ragengine.conversations.budget import Budget
from ragengine.conversations.events import event
from ragengine.conversations.file_records import ACTIVE_FILE_STATUSES
from ragengine.conversations.prompting import (
    DEFAULT_SYSTEM_PROMPT,
    TOOLS_SYSTEM_PROMPT,
    InlineDoc,
    build_messages,
    format_context,
    history_turns,
)
from ragengine.conversations.retrieval import session_search
from ragengine.conversations.store import SessionStore
from ragengine.conversations.tools import Scope, run_tool_loop
from ragengine.conversations.turn import Generation, Turn
from ragengine.embedding.core import Embedder
from ragengine.errors import BadRequest, UpstreamError
from ragengine.guardrails.answer import AnswerGuard
from ragengine.index.api import IndexAPI
from ragengine.index.types import RetrievedNode
from ragengine.llm.availability import tool_calls_refused
from ragengine.llm.client import LLMClient
from ragengine.metrics import GROUNDEDNESS_SCORE, LLM_FALLBACKS, SESSION_MESSAGES, TOOL_CALLS, UNGROUNDED_ANSWERS
from ragengine.observability import tracing
from ragengine.protocol.conversations import MAIN_THREAD, MessageRequest
from ragengine.rag.extractive import NO_ANSWER, extractive_answer
from ragengine.rag.groundedness import assess_groundedness
from ragengine.rag.no_context import DISCLAIMER, REFUSAL, REFUSAL_METHOD
from ragengine.rag.reformulate import reformulate_query
from ragengine.settings import EngineSettings

log = logging.getLogger(__name__)
GENERATION_START = event("generation_start", message="Generating the answer...", generation_method="llm")
_BACKGROUND: set[asyncio.Task] = set()  # replies stored after the client left (kept referenced until done)


def check_session_index(index_name: str | None, settings: EngineSettings) -> None:
    """A session's knowledge index is searched unscoped, so it may not be the index that holds every
    conversation's uploads: that would widen the session's scope to other sessions' files."""
    if index_name is not None and index_name == settings.conversation_index:
        raise BadRequest(f"index_name '{index_name}' holds the files uploaded to conversations; a session searches "
                         "its own files there already (scoped). Name a knowledge index instead.", param="index_name")


class ConversationService:
    def __init__(self, settings: EngineSettings, store: SessionStore, registry: IndexAPI, llm: LLMClient,
                 embedder: Embedder | None = None, guardrails: Any = None) -> None:
        self.settings = settings
        self.store = store
        self.registry = registry
        self.llm = llm
        self.embedder = embedder
        self.guardrails = guardrails  # the output policy (guardrails/runtime.py), or None

    @property
    def llm_ok(self) -> bool:
        return bool(getattr(self.llm, "configured", False))

    @property
    def availability(self) -> Any:
        """The LLM client's LLMAvailability (None for a client without one)."""
        return getattr(self.llm, "availability", None)

    async def run(self, session_id: str, req: MessageRequest, *, acl: Acl | None = None,
                  files_of: str | None = None) -> AsyncIterator[dict]:
        """The message's events, in the seed's order; the steps below each yield theirs. ``acl``: the caller's
        document ACL, applied to every search (the knowledge index, the session's files, tool calls);
        ``files_of``: files in ``req.file_ids`` must be this principal's (access.decide.owner_filter)."""
        tracing.annotate(**{"session.id": session_id, "session.mode": req.mode})
        turn = Turn(session_id, req, time.perf_counter(), acl=acl, files_of=files_of, thread_id=req.thread_id,
                    meta={"mode": req.mode, "query_used": req.content},
                    out=AnswerGuard(self.guardrails))  # fail-closed without a usable policy: 503 here
        async for evt in self._open(turn):
            yield evt
        gen = Generation()
        try:
            for step in (self._reformulate, self._gather_context):
                async for evt in step(turn):
                    yield evt
            async for evt in self._generate(turn, gen):
                yield evt
            if gen.method is None:
                async for evt in self._answer_extractively(turn, gen):
                    yield evt
            async for evt in self._complete(turn, gen):
                yield evt
        except (asyncio.CancelledError, GeneratorExit):
            if not turn.replied:  # the client went away: keep what was said, marked as cut short
                self._store_interrupted(turn, gen)
            raise

    async def _open(self, t: Turn) -> AsyncIterator[dict]:
        """Check the session and thread (404s), branch a new thread when asked and attach files (one
        transaction: ``SessionStore.open_turn``), read the history, store the user message."""
        s, req = self.settings, t.req
        if req.session_id is not None and req.session_id != t.session_id:
            raise BadRequest(f"session_id '{req.session_id}' in the body is not the session of the URL.", param="session_id")
        t.session = await self.store.get_session(t.session_id)
        if req.parent_message_id is not None and "thread_id" in req.model_fields_set and req.thread_id == MAIN_THREAD:
            raise BadRequest("parent_message_id starts a new thread; it cannot be used with thread_id 'main'.",
                             param="parent_message_id")
        new_id = req.thread_id if req.parent_message_id is not None and "thread_id" in req.model_fields_set else None
        # The branch and the files in one transaction: a missing file after a new branch leaves no branch.
        t.thread_id = await self.store.open_turn(t.session_id, t.thread_id, parent_message_id=req.parent_message_id,
                                                 new_thread_id=new_id, file_ids=req.file_ids, owned_by=t.files_of)
        n_history = s.session_history_messages
        if n_history:
            stored = await self.store.history(t.session_id, t.thread_id, last=n_history)
            t.history = history_turns(stored, reformulated=s.reformulated_query_to_llm)
        t.user = await self.store.add_message(t.session_id, t.thread_id, "user", req.content,
                                              {"file_ids": req.file_ids} if req.file_ids else {})
        t.query = t.prompt = req.content
        yield event("message_start", session_id=t.session_id, thread_id=t.thread_id, user_message=t.user.to_dict())

    async def _reformulate(self, t: Turn) -> AsyncIterator[dict]:
        req = t.req
        if req.mode == "none" or not (req.reformulate if req.reformulate is not None else self.settings.reformulate):
            return
        ref = await reformulate_query(self.llm, self.settings, req.content, t.history)
        t.query = ref.query
        if ref.reformulated and self.settings.reformulated_query_to_llm:
            t.prompt = ref.query  # the seed: the LLM answers the standalone question; the user's words are stored
        shown = t.out.scrub(ref.to_dict())  # the LLM wrote the rewrite: through the policy before it is shown
        t.meta["query_used"], t.meta["reformulation"] = shown.get("query"), shown
        yield event("reformulated", **shown)

    async def _gather_context(self, t: Turn) -> AsyncIterator[dict]:
        """Scope, token budget, inline files and (rag mode) retrieved chunks, fitted to the budget."""
        s, req = self.settings, t.req
        files = await self.store.session_files(t.session_id) if req.mode != "none" else []
        t.scope = Scope(s.conversation_index, tuple(f.id for f in files if f.status == "completed"), t.acl)
        pending = [f for f in files if f.status in ACTIVE_FILE_STATUSES and f.text]
        t.meta["scope_file_ids"] = list(t.scope.file_ids)
        t.budget = await Budget.create(self.llm, s, req.max_tokens) if self.llm_ok else None
        t.mode = req.mode
        if t.mode == "tools" and not t.scope.file_ids and self.llm_ok:
            t.mode = "rag"  # nothing searchable yet: a tool round would find nothing; answer from inline text
            t.meta["tools_skipped"] = "no completed files in this session"
        refused = self.availability.tools_refused() if t.mode == "tools" and self.availability else None
        if refused:  # the LLM refused tool calls lately: no round trip to hear it again
            t.mode, t.meta["tools_unavailable"] = "rag", refused
        t.instructions = req.system_prompt or (TOOLS_SYSTEM_PROMPT if t.mode == "tools" else DEFAULT_SYSTEM_PROMPT)
        if t.budget is not None:
            t.history = await t.budget.fit_history(t.instructions, t.history, t.prompt)
        if req.mode != "none":
            yield event("rag_start", message="Retrieving relevant context...", mode=req.mode,
                        query=t.meta.get("query_used", t.query), scope_file_ids=list(t.scope.file_ids))
        t.inline = await t.budget.fit_inline(pending) if t.budget is not None else [
            InlineDoc(f.id, f.filename, f.text or "") for f in pending]
        t.meta["inline_files"] = [{"file_id": d.file_id, "filename": d.filename, "truncated": d.truncated}
                                  for d in t.inline]
        if t.mode == "tools" and self.llm_ok:
            return  # the model searches in its tool rounds; context_found follows them
        if req.mode != "none":
            async for evt in self._retrieve_context(t):
                yield evt

    async def _retrieve_context(self, t: Turn) -> AsyncIterator[dict]:
        """Retrieval scoped to the session's files (and its knowledge index), fitted to the budget."""
        assert t.scope is not None, "the scope is set when the turn opens"
        t_r = time.perf_counter()
        t.nodes = await session_search(self.registry, self.settings, t.session, t.scope, t.query, self._top_k(t.req), t.meta)
        if t.budget is not None:
            with tracing.stage("context_selection", retrieved=len(t.nodes)) as span:
                t.nodes = await t.budget.fit_nodes(t.nodes)
                tracing.annotate(span, selected=len(t.nodes), doc_ids=[n.doc_id for n in t.nodes[:20]])
        t.meta["retrieval_ms"] = round((time.perf_counter() - t_r) * 1000, 2)
        yield self._context_found(t)

    def _context_found(self, t: Turn) -> dict:
        t.context_sent = True
        return event("context_found", context_chunks=len(t.nodes), inline_files=[d.file_id for d in t.inline],
                     sources=[n.to_source_node() for n in t.nodes])

    def _no_context(self, t: Turn) -> str | None:
        """The ``no_context`` setting when retrieval ran (rag mode) and nothing passed the threshold, else None."""
        if t.mode != "rag" or t.req.mode == "none" or t.nodes or t.inline:
            return None
        return str(self.settings.no_context)

    def _top_k(self, req: MessageRequest) -> int:
        return req.top_k or self.settings.conversation_top_k

    async def _generate(self, t: Turn, gen: Generation) -> AsyncIterator[dict]:
        """The LLM's answer, streamed as text chunks (tools mode: after the tool rounds). ``generation_start``
        goes out with the first text, so an LLM that fails before answering leaves only the extractive one."""
        if self._no_context(t) == "refuse":
            yield event("generation_start", message="No document matched the question.", generation_method=REFUSAL_METHOD)
            gen.answer, gen.method = REFUSAL, REFUSAL_METHOD
            if (shown := t.out.feed(REFUSAL)):
                yield event("text_chunk", content=shown)
            return
        if not self.llm_ok:
            return
        context = format_context(t.nodes, t.inline) if (t.mode == "rag" or t.inline) else None
        messages = build_messages(t.instructions, context, t.history, t.prompt)
        extra = {k: v for k, v in (("temperature", t.req.temperature),
                                   ("max_tokens", t.budget.answer_tokens if t.budget else None)) if v is not None}
        try:
            if t.mode == "tools":
                try:
                    async for evt in self._tools(t, messages, extra, gen):
                        yield evt
                    if self.availability:
                        self.availability.tools_work()
                    return
                except UpstreamError as exc:
                    if gen.answer or not tool_calls_refused(exc.status_code, exc.message):
                        raise
                    async for evt in self._without_tools(t, exc):
                        yield evt
                    messages = build_messages(t.instructions, format_context(t.nodes, t.inline), t.history, t.prompt)
            async with contextlib.aclosing(self._stream(messages, extra, gen)) as pieces:
                async for piece in pieces:
                    if not gen.answer:
                        yield GENERATION_START
                    gen.answer += piece
                    if (shown := t.out.feed(piece)):
                        yield event("text_chunk", content=shown)
                    if t.out.stopped:
                        break  # blocked (or cut by a limit): closing the pieces closes the LLM stream
            if not gen.answer:
                yield GENERATION_START  # the model said nothing; the empty answer is still its answer
        except UpstreamError as exc:  # every endpoint failed or refused (LLMUnavailable), or an unusable reply
            if gen.answer:  # failed mid-stream: keep what was said, say it is cut short
                gen.method = "llm"
                gen.details.update(truncated=True, error=exc.message)
            else:
                gen.method, gen.fallback_reason = None, exc.fallback_reason()
                gen.details = {k: v for k, v in gen.details.items() if k in ("tool_calls", "tool_iterations")}
                gen.error = exc

    async def _without_tools(self, t: Turn, exc: UpstreamError) -> AsyncIterator[dict]:
        """The LLM refused tool calls (vLLM without a tool parser): answer as rag mode does, with the
        reason in the reply's metadata (and in /health; logged once: llm/availability.py)."""
        reason = self.availability.refuse_tools(exc.message) if self.availability else exc.message
        t.mode, t.meta["tools_unavailable"] = "rag", reason
        t.instructions = t.req.system_prompt or DEFAULT_SYSTEM_PROMPT
        async for evt in self._retrieve_context(t):
            yield evt

    async def _answer_extractively(self, t: Turn, gen: Generation) -> AsyncIterator[dict]:
        """No LLM, or it failed before any text: the most relevant sentences of the context (or, with
        ``extractive_fallback`` off, the error, after an empty reply saying so is stored)."""
        if gen.error is not None and not self.settings.extractive_fallback:
            meta = {**t.meta, "generation_method": "none", "fallback_reason": gen.fallback_reason,
                    "error": gen.error.message}
            await self.store.add_message(t.session_id, t.thread_id, "assistant", "", meta)
            t.replied = True
            raise gen.error
        reason = gen.fallback_reason or "No LLM is configured."
        if gen.error is not None:
            LLM_FALLBACKS.labels("extractive").inc()
            tracing.annotate(**{"llm.fallback": "extractive"})
        if t.mode == "tools" and not t.nodes and self.llm_ok:  # the tool loop failed before searching
            assert t.scope is not None, "the scope is set when the turn opens"
            t.nodes = await session_search(self.registry, self.settings, t.session, t.scope, t.query, self._top_k(t.req))
        if t.req.mode != "none" and not t.context_sent:
            yield self._context_found(t)
        yield event("generation_start", message=f"Answering from the documents: {reason}",
                    generation_method="extractive_fallback")
        pool = t.nodes or [RetrievedNode(d.file_id, d.file_id, d.text, 0.0, {"file_id": d.file_id,
                                                                             "filename": d.filename}) for d in t.inline]
        gen.answer = extractive_answer(t.query, pool) or (
            NO_ANSWER if t.req.mode != "none" else "No language model is available to answer.")
        gen.method, gen.fallback_reason = "extractive_fallback", reason
        gen.details["endpoint"] = None
        if (shown := t.out.feed(gen.answer)):
            yield event("text_chunk", content=shown)

    async def _complete(self, t: Turn, gen: Generation) -> AsyncIterator[dict]:
        """Groundedness (and its disclaimer), metrics, the stored reply and the ``message_complete`` event."""
        req, meta = t.req, t.meta
        if (shown := t.out.close()):  # what the output policy held back, or its block message
            yield event("text_chunk", content=shown)
        meta.update(gen.to_meta())
        meta["sources"] = [n.to_source_node() for n in t.nodes]
        if t.out.report is not None:
            meta["guardrails"] = t.out.report
        if req.mode != "none":
            with tracing.stage("groundedness", sources=len(t.inline) + len(t.nodes)) as span:
                report = await assess_groundedness(gen.answer, [d.text for d in t.inline] + [n.text for n in t.nodes],
                                                   threshold=self.settings.groundedness_threshold,
                                                   embedder=self.embedder)
                tracing.annotate(span, score=report.score, flagged=report.flagged)
            meta["groundedness"] = report.to_dict(details=req.groundedness_details)
            if report.score is not None:
                GROUNDEDNESS_SCORE.labels(req.mode).observe(report.score)
            if report.flagged:
                UNGROUNDED_ANSWERS.labels(req.mode).inc()
                disclaimer = self.settings.groundedness_disclaimer.strip()
                meta["groundedness"]["disclaimer"] = bool(disclaimer)
                if disclaimer and not t.out.blocked:  # the seed: a low-confidence answer carries a disclaimer
                    piece = ("\n\n" if t.out.shown else "") + disclaimer
                    gen.answer += piece
                    t.out.shown += piece  # the engine's own words: not screened
                    yield event("text_chunk", content=piece)
        if (policy := self._no_context(t)) is not None:
            meta["no_context"] = policy
            if policy == "disclaim" and not t.out.blocked:  # rag/no_context.py: the client sees it is ungrounded
                piece = ("\n\n" if t.out.shown else "") + DISCLAIMER
                gen.answer += piece
                t.out.shown += piece
                yield event("text_chunk", content=piece)
        SESSION_MESSAGES.labels(req.mode, meta.get("generation_method", "llm")).inc()
        meta["total_ms"] = round((time.perf_counter() - t.started) * 1000, 2)
        reply = await self.store.add_message(t.session_id, t.thread_id, "assistant", t.out.shown, meta)
        t.replied = True
        yield event("message_complete", session_id=t.session_id, thread_id=t.thread_id, user_message_id=t.user.id,
                    assistant_message=reply.to_dict(), metadata=meta)

    def _store_interrupted(self, t: Turn, gen: Generation) -> None:
        """Store the answer so far, flagged ``truncated``, in a task of its own: the request's task is being
        cancelled (or its generator closed) and can await nothing more."""
        meta = {**t.meta, **gen.to_meta(), "sources": [n.to_source_node() for n in t.nodes], "truncated": True,
                "interrupted": "the client disconnected before the answer was complete"}
        meta.setdefault("generation_method", "llm" if gen.answer else "none")
        task = asyncio.get_running_loop().create_task(  # what the client saw: never text the policy held back
            self.store.add_message(t.session_id, t.thread_id, "assistant", t.out.shown, meta))
        _BACKGROUND.add(task)
        task.add_done_callback(_BACKGROUND.discard)

    async def _stream(self, messages: list[dict], extra: dict, gen: Generation) -> AsyncGenerator[str, None]:
        # usage comes on a stream only when asked for (OpenAI's and vLLM's stream_options)
        payload = {**extra, "messages": messages, "stream_options": {"include_usage": True}}
        model = await self.llm.model_name()
        if model:
            payload["model"] = model
        stream = await self.llm.open_stream(payload)
        gen.method = "llm"
        gen.details.update(endpoint=stream.endpoint, model=model)
        try:
            async for chunk in stream:
                for choice in chunk.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        yield piece
                if chunk.get("usage"):
                    gen.details["usage"] = chunk["usage"]
        finally:
            await stream.aclose()

    async def _tools(self, t: Turn, messages: list[dict], extra: dict, gen: Generation) -> AsyncIterator[dict]:
        """The tool loop, each executed call streamed as it happens (the loop runs as a task feeding a queue)."""
        queue: asyncio.Queue = asyncio.Queue()

        async def on_call(record: dict) -> None:
            TOOL_CALLS.inc()
            t.out.scrub_in_place(record)  # the model wrote it: the event, metadata and history hold it screened
            await queue.put(record)

        select = t.budget.fit_nodes if t.budget is not None else None
        assert t.scope is not None, "the scope is set when the turn opens"
        task = asyncio.create_task(run_tool_loop(
            self.llm, self.registry, t.scope, messages, max_iterations=self.settings.tool_max_iterations,
            default_top_k=self._top_k(t.req), max_top_k=self.settings.max_top_k, extra=extra, on_call=on_call,
            select=select, default_query=t.query))
        try:
            while not task.done() or not queue.empty():
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield event("tool_call", **getter.result())
                else:
                    getter.cancel()
            result = task.result()
        finally:
            if not task.done():
                task.cancel()
        t.nodes = result.nodes
        yield self._context_found(t)
        gen.details.update(endpoint=result.endpoint, tool_calls=result.calls, tool_iterations=result.iterations,
                           usage=result.usage)
        if result.answer:
            gen.answer, gen.method = result.answer, "llm_tools"
            yield GENERATION_START
            if (shown := t.out.feed(result.answer)):
                yield event("text_chunk", content=shown)
        else:  # the model kept calling tools (or said nothing): answer from what it found
            gen.fallback_reason = "the model gave no answer after its tool calls"

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
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from ragengine.chat.extractive import NO_ANSWER, extractive_answer
from ragengine.conversations import metrics
from ragengine.conversations.budget import Budget
from ragengine.conversations.events import event
from ragengine.conversations.groundedness import assess_groundedness
from ragengine.conversations.prompting import (
    DEFAULT_SYSTEM_PROMPT,
    TOOLS_SYSTEM_PROMPT,
    InlineDoc,
    build_messages,
    format_context,
    history_turns,
)
from ragengine.conversations.reformulate import reformulate_query
from ragengine.conversations.tools import Scope, run_tool_loop, scoped_search
from ragengine.index.types import RetrievedNode
from ragengine.llm.client import LLMUnavailable
from ragengine.protocol.conversations import MessageRequest

log = logging.getLogger(__name__)
ACTIVE = ("uploaded", "processing")


class ConversationService:
    def __init__(self, settings: Any, store: Any, registry: Any, llm: Any, embedder: Any = None) -> None:
        self.settings = settings
        self.store = store
        self.registry = registry
        self.llm = llm
        self.embedder = embedder

    async def run(self, session_id: str, req: MessageRequest) -> AsyncIterator[dict]:
        t0 = time.perf_counter()
        s = self.settings
        session = await self.store.get_session(session_id)
        await self.store.get_thread(session_id, req.thread_id)
        if req.file_ids:
            await self.store.attach_files(session_id, req.file_ids)
        n_history = s.session_history_messages
        history = history_turns(await self.store.history(session_id, req.thread_id, last=n_history)) if n_history else []
        user = await self.store.add_message(session_id, req.thread_id, "user", req.content,
                                            {"file_ids": req.file_ids} if req.file_ids else {})
        yield event("message_start", session_id=session_id, thread_id=req.thread_id, user_message=user.to_dict())

        meta: dict[str, Any] = {"mode": req.mode, "query_used": req.content}
        query = req.content
        if req.mode != "none" and (req.reformulate if req.reformulate is not None else s.reformulate):
            ref = await reformulate_query(self.llm, s, req.content, history)
            metrics.record_reformulation(ref)
            query = meta["query_used"] = ref.query
            meta["reformulation"] = ref.to_dict()
            yield event("reformulated", **ref.to_dict())

        files = await self.store.session_files(session_id) if req.mode != "none" else []
        scope = Scope(s.conversation_index, tuple(f.id for f in files if f.status == "completed"))
        pending = [f for f in files if f.status in ACTIVE and f.text]
        meta["scope_file_ids"] = list(scope.file_ids)
        top_k = req.top_k or s.conversation_top_k
        llm_ok = bool(getattr(self.llm, "configured", False))
        budget = await Budget.create(self.llm, s, req.max_tokens) if llm_ok else None
        mode = req.mode
        if mode == "tools" and not scope.file_ids and llm_ok:
            mode = "rag"  # nothing searchable yet: a tool round would find nothing; answer from inline text
            meta["tools_skipped"] = "no completed files in this session"
        instructions = req.system_prompt or (TOOLS_SYSTEM_PROMPT if mode == "tools" else DEFAULT_SYSTEM_PROMPT)
        if budget is not None:
            history = await budget.fit_history(instructions, history, req.content)

        nodes: list = []
        if req.mode != "none":
            yield event("rag_start", message="Retrieving relevant context...", mode=req.mode, query=query,
                        scope_file_ids=list(scope.file_ids))
        inline = await budget.fit_inline(pending) if budget is not None else [
            InlineDoc(f.id, f.filename, f.text) for f in pending]
        if mode == "rag" or (mode == "tools" and not llm_ok):
            t_r = time.perf_counter()
            nodes = await self._retrieve(session, scope, query, top_k, meta)
            if budget is not None:
                nodes = await budget.fit_nodes(nodes)
            meta["retrieval_ms"] = round((time.perf_counter() - t_r) * 1000, 2)
        if mode == "rag" or inline:
            yield event("context_found", context_chunks=len(nodes), inline_files=[d.file_id for d in inline],
                        sources=[n.to_source_node() for n in nodes])
        meta["inline_files"] = [{"file_id": d.file_id, "filename": d.filename, "truncated": d.truncated} for d in inline]

        context = format_context(nodes, inline) if (mode == "rag" or inline) else None
        messages = build_messages(instructions, context, history, req.content)
        extra = {k: v for k, v in (("temperature", req.temperature), ("max_tokens", budget.answer_tokens if budget else None)) if v is not None}
        answer, gen = "", {}
        if llm_ok:
            yield event("generation_start", message="Generating the answer...", generation_method="llm")
            try:
                if mode == "tools":
                    async for item in self._tools(scope, messages, extra, top_k, budget, gen):
                        yield item
                    nodes = gen.pop("nodes")
                    answer = gen.pop("answer")
                    if answer:
                        yield event("text_chunk", content=answer)
                    else:  # the model kept calling tools (or said nothing): answer from what it found
                        gen = {"fallback_reason": "the model gave no answer after its tool calls", **gen}
                        gen.pop("generation_method")
                else:
                    async for piece in self._stream(messages, extra, gen):
                        answer += piece
                        yield event("text_chunk", content=piece)
            except LLMUnavailable as exc:
                if answer:  # failed mid-stream: keep what was said, say it is cut short
                    gen.update(generation_method="llm", truncated=True, error=exc.message)
                else:
                    gen = {"fallback_reason": exc.message}
        if not answer and "generation_method" not in gen:
            reason = gen.get("fallback_reason") or "No LLM is configured."
            yield event("generation_start", message=f"Answering from the documents: {reason}",
                        generation_method="extractive_fallback")
            if mode == "tools" and not nodes and llm_ok:  # tool loop failed before searching
                nodes = await self._retrieve(session, scope, query, top_k)
            pool = nodes or [RetrievedNode(d.file_id, d.file_id, d.text, 0.0, {"file_id": d.file_id,
                                                                                "filename": d.filename}) for d in inline]
            answer = extractive_answer(query, pool) or (NO_ANSWER if req.mode != "none" else
                                                         "No language model is available to answer.")
            gen = {**gen, "generation_method": "extractive_fallback", "fallback_reason": reason, "endpoint": None}
            yield event("text_chunk", content=answer)
        meta.update(gen)
        meta["sources"] = [n.to_source_node() for n in nodes]

        if req.mode != "none":
            report = await assess_groundedness(answer, [d.text for d in inline] + [n.text for n in nodes],
                                               threshold=s.groundedness_threshold, embedder=self.embedder)
            meta["groundedness"] = report.to_dict(details=req.groundedness_details)
            if report.score is not None:
                metrics.GROUNDEDNESS_SCORE.labels(req.mode).observe(report.score)
                if report.flagged:
                    metrics.UNGROUNDED_ANSWERS.labels(req.mode).inc()
        metrics.SESSION_MESSAGES.labels(req.mode, meta.get("generation_method", "llm")).inc()
        meta["total_ms"] = round((time.perf_counter() - t0) * 1000, 2)
        reply = await self.store.add_message(session_id, req.thread_id, "assistant", answer, meta)
        yield event("message_complete", session_id=session_id, thread_id=req.thread_id, user_message_id=user.id,
                    assistant_message=reply.to_dict(), metadata=meta)

    async def _retrieve(self, session: Any, scope: Scope, query: str, top_k: int, meta: dict | None = None) -> list:
        """The session's files (scoped) plus its knowledge index (if any), best similarity first."""
        found = list(await scoped_search(self.registry, scope, query, top_k))
        if session.index_name and self.registry.exists(session.index_name):
            found += await self.registry.retrieve(session.index_name, query, top_k)
        elif session.index_name and meta is not None:
            meta["index_missing"] = session.index_name  # created later, or deleted: not an error
        if session.index_name:  # two result lists: merge on the shared [0, 1] cosine scale
            found.sort(key=lambda n: n.score, reverse=True)
        return found[:top_k]

    async def _stream(self, messages: list[dict], extra: dict, gen: dict) -> AsyncIterator[str]:
        payload = {**extra, "messages": messages}
        model = await self.llm.model_name()
        if model:
            payload["model"] = model
        stream = await self.llm.open_stream(payload)
        gen.update(generation_method="llm", endpoint=stream.endpoint, model=model)
        async for chunk in stream:
            for choice in chunk.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    yield piece
            if chunk.get("usage"):
                gen["usage"] = chunk["usage"]

    async def _tools(self, scope: Scope, messages: list[dict], extra: dict, top_k: int, budget: Any,
                     gen: dict) -> AsyncIterator[dict]:
        # The loop runs as a task so each executed tool call is streamed as it happens.
        queue: asyncio.Queue = asyncio.Queue()

        async def on_call(record: dict) -> None:
            metrics.TOOL_CALLS.inc()
            await queue.put(record)

        select = budget.fit_nodes if budget is not None else None
        task = asyncio.create_task(run_tool_loop(
            self.llm, self.registry, scope, messages, max_iterations=self.settings.tool_max_iterations,
            default_top_k=top_k, max_top_k=self.settings.max_top_k, extra=extra, on_call=on_call, select=select))
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
        yield event("context_found", context_chunks=len(result.nodes), sources=[n.to_source_node() for n in result.nodes])
        gen.update(generation_method="llm_tools", endpoint=result.endpoint, tool_calls=result.calls,
                   tool_iterations=result.iterations, usage=result.usage, nodes=result.nodes, answer=result.answer)

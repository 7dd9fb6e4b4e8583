"""One job of an index: build a version (re-index) or bring a retired one up to date (activate), then swap.

The build is a loop of comparison passes, never a one-off copy, which is what makes it resumable and safe
beside live writes:

1. compare the live version with the target by document (``digests``: text and metadata);
2. copy what differs, in batches, from the stored text (chunked and embedded with the target's model),
   each batch written only where the live version still holds the same document (``sync_documents``'s
   ``source``), and delete from the target what the live version no longer has;
3. repeat until a pass finds nothing to do. Writes that arrive meanwhile reach the target too
   (``writes.mirror``), so passes converge; what a crash cut in half is found by the next.

A ``kill -9`` loses nothing: every batch written to the target is durable, the job stays in the book, and
the process that starts next (or, on an external store, any replica once the lease ran out) claims it and
resumes with a pass that finds only what is left. Progress (documents done of total) is the share of
the live version's documents the target holds the same, written to the book at most every second.

Then, on an external store, the swap waits (``reindex_swap_wait_s`` at most) until every replica seen
lately has loaded the target's model. A re-index with a ``gate`` is scored first (``reg.gate_check``, which
the evaluation service sets: the versions layer knows nothing of golden sets): it swaps in one book write
when the gate passes, and otherwise ends ``rejected``, the target kept with its scores and the live version
left serving. Queries read the live version and its
model together from the book, so whatever replica answers, a version is searched with its own model.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ragengine.errors import EngineError
from ragengine.versions import book as bk

log = logging.getLogger(__name__)
BATCH = 64  # documents per copy step (one embedding pass each)
PROGRESS_EVERY_S = 1.0
STORE_RETRIES, STORE_RETRY_S = 60, 5.0  # a store outage of up to 5 minutes suspends a job, then it fails


class LostJob(Exception):
    """The job is not this replica's any more (cancelled, superseded, or its lease taken over)."""


async def run_job(reg: Any, name: str, job_id: str) -> None:
    try:
        for attempt in range(STORE_RETRIES + 1):
            try:
                await _run(reg, name, job_id)
                break
            except EngineError as exc:
                # The store went away for a while: the job resumes from what is written once it is back.
                if exc.status_code != 503 or attempt == STORE_RETRIES:
                    raise
                log.warning("index %r: job %s waits for the store (%s)", name, job_id, exc.message)
                await asyncio.sleep(STORE_RETRY_S)
    except (LostJob, asyncio.CancelledError):
        log.info("index %r: job %s stopped here (cancelled, or taken over)", name, job_id)
    except Exception as exc:
        why = exc.message if isinstance(exc, EngineError) else f"{type(exc).__name__}: {exc}"
        log.exception("index %r: job %s failed", name, job_id)
        dropped: list[bk.Version] = []

        def change(book: bk.Book | None) -> bk.Book | None:
            if book is None:
                return None
            new, gone = bk.fail(book, job_id, why[:2000], time.time())
            dropped.extend(gone)
            return new

        try:
            await reg.state.update(name, change)
            await reg.state.drop(dropped)
        except Exception:
            log.exception("index %r: recording the failure of job %s failed", name, job_id)
    finally:
        if reg.state.jobs.get(name) is asyncio.current_task():
            reg.state.jobs.pop(name, None)


class _Progress:
    def __init__(self, reg: Any, name: str, job_id: str) -> None:
        self.reg, self.name, self.job_id = reg, name, job_id
        self.at = 0.0

    async def __call__(self, done: int, total: int, message: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.at < PROGRESS_EVERY_S:
            return
        self.at = now
        held: list[bool] = []

        def change(book: bk.Book | None) -> bk.Book | None:
            new = None if book is None else bk.progress(book, self.job_id, self.reg.state.replica, done, total, message,
                                                        time.time(), self.reg.state.lease_s)
            held.append(new is not None)
            return new or book

        await self.reg.state.update(self.name, change)
        if not held or not held[0]:
            raise LostJob(self.job_id)


async def _run(reg: Any, name: str, job_id: str) -> None:
    inner = reg.inner
    book = await reg.state.fresh(name)
    if book is None or book.running_job is None or book.running_job.id != job_id:
        raise LostJob(job_id)
    job = book.running_job
    target = book.version(job.version)
    assert target.model is not None
    await reg.embedders.get(target.model)
    report = _Progress(reg, name, job_id)
    await inner.ensure(target.physical, target.chunking)
    log.info("index %r: %s of version %d (model %r) running", name, job.kind, target.version, target.model)
    while True:
        book = await reg.state.fresh(name)
        if book is None or book.running_job is None or book.running_job.id != job_id:
            raise LostJob(job_id)
        live = book.live_version
        source, have = await asyncio.gather(inner.digests(live.physical), inner.digests(target.physical))
        todo = [d for d, digest in source.items() if have.get(d) != digest]
        extra = [d for d in have if d not in source]
        total = len(source)
        done = total - len(todo)
        await report(done, total, f"{done} of {total} documents", force=True)
        if not todo and not extra:
            break
        if extra:
            await inner.delete_documents(target.physical, extra)
        wrote = 0
        for i in range(0, len(todo), BATCH):
            batch = todo[i:i + BATCH]
            docs = await inner.fetch(live.physical, batch)
            wrote += await inner.sync_documents(target.physical, list(docs.values()), chunking=target.chunking,
                                                source=live.physical)
            done += len(batch)
            await report(min(done, total), total, f"{min(done, total)} of {total} documents")
        if not wrote and not extra:
            await asyncio.sleep(0.2)  # only writes in flight differ: their mirrors land in a moment
    # PostgreSQL: the new version's HNSW index, built in one pass (FAISS built its graph as it wrote).
    await report(total, total, f"{total} of {total} documents; building the vector index", force=True)
    await inner.finish_load(target.physical)
    verdict = await _gate(reg, name, job, report, total)
    if reg.shared and (verdict is None or verdict["passed"]):
        await _wait_for_replicas(reg, target.model, report, total)
    dropped: list[bk.Version] = []
    swapped: list[bk.Book] = []

    def change(book: bk.Book | None) -> bk.Book | None:
        if book is None:
            return None
        now, keep = time.time(), reg.settings.index_versions_kept
        result = (bk.swap(book, job_id, reg.state.replica, now, keep, verdict) if verdict is None or verdict["passed"]
                  else bk.reject(book, job_id, reg.state.replica, now, keep, verdict))
        if result is None:
            return book
        swapped.append(result[0])
        dropped.extend(result[1])
        return result[0]

    await reg.state.update(name, change)
    if not swapped:
        raise LostJob(job_id)
    if verdict is not None and not verdict["passed"]:
        log.warning("index %r: %s; version %d keeps serving", name, verdict["message"], swapped[0].live)
    else:
        log.info("index %r: version %d is live (model %r); %d old version(s) dropped", name, target.version,
                 target.model, len(dropped))
    await reg.state.drop(dropped)


async def _gate(reg: Any, name: str, job: bk.Job, report: _Progress, total: int) -> dict | None:
    """The gate's verdict on the built version (None: no gate). Scoring renews the job's lease as it goes."""
    if job.kind != bk.REINDEX or not job.gate:
        return None
    check = getattr(reg, "gate_check", None)
    if check is None:
        raise RuntimeError("this re-index has a gate, but the engine runs no evaluation service to apply it")

    async def scoring(message: str) -> None:
        await report(total, total, f"built; {message}")

    await report(total, total, "built; scoring it on the gate's golden set", force=True)
    verdict = await check(name, job, scoring)
    return verdict


async def _wait_for_replicas(reg: Any, model: str, report: _Progress, total: int) -> None:
    deadline = time.monotonic() + reg.settings.reindex_swap_wait_s
    while True:
        missing = await reg.replicas_without(model)
        if not missing:
            return
        if time.monotonic() > deadline:
            log.warning("swapping although replicas %s have not loaded %r yet (they load it on their next query)",
                        ", ".join(missing), model)
            return
        await report(total, total, f"built; waiting for {len(missing)} replica(s) to load the model", force=True)
        await asyncio.sleep(1.0)

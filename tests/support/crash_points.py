"""``kill -9`` of a real process at a chosen point inside an admin operation, and what a restart finds.

``python -m tests.support.crash_points`` is a small fork server: it imports the engine and loads the
embedding model (wordllama: numpy only, so nothing runs threads yet) once, then for each JSON line on its
stdin forks a child and answers one JSON line on stdout:

- ``{"run": SCENARIO, "settings": {...}, "kill": {...}}``: the child builds the engine's index registry
  (``ragengine.versions.build_registry``, as ``ragengine serve`` does) on ``settings``, makes the scenario's
  state, then arms the kill point and runs the operation. At the point it sends itself SIGKILL: no
  ``finally``, no ``except`` clean-up, no close runs, open files and database connections are dropped by
  the kernel (PostgreSQL rolls back what was in flight), the FAISS writer lock is released. Answer:
  ``{"signal": 9}`` (killed at the point) or ``{"exit": n}`` (the point was never reached).
- ``{"inspect": true, "settings": {...}, "copy": PATH?}``: the child starts a registry on the same data (the
  restart), waits for any job it resumes, and answers what it holds: the indexes, each one's live version
  and documents, the versions, and the physical indexes of the store (with ``copy``: after loading that
  /persist copy as index ``from-copy``).

Forking a process that loaded the model once keeps each crash point at a fraction of a second instead of
a new interpreter's start; every child is still its own process, killed for real.

Kill points (``kill``): ``{"at": TARGET, "when": "before"|"after", "nth": N, "live": V}``: the N-th call of
TARGET (counted from when the operation starts), or the first whose written book has live version V:
``books.update`` (a version book written), ``inner.load`` (a /persist copy read into a hidden index),
``inner.import_batch`` (a batch of an import written), ``inner.delete_index`` (a physical index dropped),
``os.replace`` (a file renamed into place: FAISS snapshots and books). Only calls for the operation's index
count (the heartbeats an external store's replicas write to the books do not).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import traceback
from typing import Any

DOCS = [{"doc_id": f"d{i}", "text": f"Record {i}: the ferry from pier {i} leaves at {i + 6}:00 carrying bicycles.",
         "metadata": {"i": i}} for i in range(12)]
CHANGED = [{**d, "text": d["text"].replace("ferry", "bus")} for d in DOCS]


def _settings(values: dict) -> Any:
    from ragengine.settings import EngineSettings

    return EngineSettings(**values)


async def _registry(values: dict, model: Any) -> Any:
    from ragengine.versions import build_registry
    from tests.support.embedding import Borrowed

    registry = build_registry(_settings(values), Borrowed(model.backend))
    await registry.start()
    return registry


def _arm(registry: Any, kill: dict, index: str) -> None:
    """SIGKILL this process at the kill point: calls for ``index`` (or one of its versions) count, not the
    background's (an external store's heartbeats are book writes too)."""
    target, when, nth, live = kill["at"], kill.get("when", "after"), kill.get("nth", 1), kill.get("live")
    calls = {"n": 0}

    def ours(args: tuple) -> bool:
        return bool(args) and isinstance(args[0], str) and (args[0] == index or args[0].startswith(index + "/"))

    def due(result: Any = None) -> bool:
        if live is not None:
            return isinstance(result, dict) and result.get("live") == live
        calls["n"] += 1
        return calls["n"] == nth

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if target == "os.replace":
        real = os.replace

        def replace(*args: Any, **kwargs: Any) -> None:
            if when == "before" and due():
                die()
            real(*args, **kwargs)
            if when == "after" and due():
                die()

        os.replace = replace  # type: ignore[assignment]  # the child only: it dies or exits
        return
    owner_name, method = target.split(".")
    owner = registry.books if owner_name == "books" else registry.inner
    real_method = getattr(owner, method)

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not ours(args):
            return await real_method(*args, **kwargs)
        if when == "before" and live is None and due():
            die()
        result = await real_method(*args, **kwargs)
        if when == "after" and due(result):
            die()
        return result

    setattr(owner, method, wrapped)


async def _export(registry: Any, name: str) -> bytes:
    return b"".join([part async for part in await registry.export(name)])


async def _chunks(data: bytes, size: int = 2048):
    for i in range(0, len(data), size):
        yield data[i:i + size]


async def _scenario(name: str, values: dict, kill: dict, model: Any) -> None:
    """The state each operation starts from, then the operation, killed at ``kill``. ``kb`` has a retired
    version 1 and a live version 2 (another chunking), both holding ``DOCS``."""
    registry = await _registry(values, model)
    await registry.add_documents("kb", DOCS)
    await registry.reindex("kb", {"chunk_size": 64}, None)
    await registry.wait_idle("kb", 120)
    if name in ("load", "persist"):  # a copy holds DOCS, the index CHANGED: a load puts DOCS back
        await registry.persist("kb", "copy")
        await registry.update_documents("kb", CHANGED)
        await registry.wait_idle("kb", 120)
    export = await _export(registry, "kb") if name == "import" else b""
    _arm(registry, kill, "imported" if name == "import" else "kb")
    if name == "load":
        await registry.load("kb", "copy", True)
    elif name == "persist":  # the copy of DOCS replaced by one of CHANGED
        await registry.persist("kb", "copy")
    elif name == "import":
        await registry.import_("imported", _chunks(export))
    elif name == "activate":
        await registry.activate("kb", 1)
        await registry.wait_idle("kb", 120)
    elif name == "drop_version":
        await registry.drop_version("kb", 1)
    elif name == "delete":
        await registry.delete_index("kb")
    else:
        raise ValueError(name)
    await registry.close()


async def _inspect(values: dict, model: Any, copy: str | None) -> dict:
    """What a restart finds; with ``copy``, also what ``/load`` reads from that /persist copy."""
    registry = await _registry(values, model)
    out: dict[str, Any] = {"indexes": {}}
    if copy is not None:
        await registry.load("from-copy", copy, False)
    for name in await registry.list_names():
        book = await registry.wait_idle(name, 120)
        page = await registry.list_documents(name, limit=100, max_text_length=None)
        out["indexes"][name] = {"live": book.live, "versions": sorted(v.version for v in book.versions),
                                "documents": sorted((d["doc_id"], d["text"]) for d in page["documents"]),
                                "job": book.job.state if book.job else None}
    inner = registry.inner
    out["physical"] = sorted(await inner.list_names()) + sorted(getattr(inner, "corrupt", {}))
    out["referenced"] = sorted(p for b in registry.state.cache.values() for p in b.physicals())
    await registry.close()
    return out


def _child(request: dict, model: Any, answer_to: str) -> None:
    try:
        if request.get("inspect"):
            result = asyncio.run(_inspect(request["settings"], model, request.get("copy")))
            with open(answer_to, "w") as fh:
                json.dump(result, fh)
        else:
            asyncio.run(_scenario(request["run"], request["settings"], request["kill"], model))
        os._exit(0)
    except BaseException:
        traceback.print_exc()
        os._exit(3)


def main() -> None:
    from ragengine.embedding import build_embedder
    from ragengine.index.chunking import Chunker, new_index_config

    settings = _settings({"embedding_model": sys.argv[1]})
    model = build_embedder(settings)  # no thread runs until it embeds
    # The sentence splitter's first use imports llama_index (seconds): once here, not in every child.
    Chunker(model, new_index_config(settings, None, model.chunk_token_limit)).split("One. Two.", {})
    assert threading.active_count() == 1, "a thread before fork() would be missing in every child"
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        answer_to = request.get("answer_to", os.devnull)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, model, answer_to)
        _, status = os.waitpid(pid, 0)
        reply: dict[str, Any] = {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else \
            {"exit": os.WEXITSTATUS(status)}
        if request.get("inspect") and reply.get("exit") == 0:
            with open(answer_to) as fh:
                reply["state"] = json.load(fh)
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()

"""The embedding model loaded while the rest of the engine is imported and started.

Loading the model (OpenVINO's import, reading the export, compiling it) took about a second of a
three-and-a-half-second start, after seconds of imports it does not depend on. ``ragengine serve`` therefore
starts the load in a thread as soon as its settings are read (``start``), before its other imports and
checks; the app's start-up takes the model from there (``take``) instead of loading it again. The thread does
its own imports, and the compilation runs in native code without the GIL, so on two cores the load overlaps
the rest almost entirely.

The early load only reads: a model folder that would first be exported (``embedding/fastpath.py`` writes the
export into the data folder) is left to the start-up, after the checks of what the data folder holds
(ragengine.preflight). The start-up takes the early model only when it was loaded for exactly the settings it
would use (the target model may come from the embedding file: it is read the same way); otherwise, or when
the early load failed, it loads its own as before (and reports its own error).

What the engine can serve without is left until the start-up has the model: the thread hands the model over,
then finishes it (``Embedder.finish``: OpenVINO's lone-query model, half a second of compiling that was the
last thing /health waited for). Queries run on the dynamic model until then. The interpreter waits for this
thread at exit, so nothing native is left running when it tears down.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from concurrent.futures import Future
from typing import Any

log = logging.getLogger(__name__)
EXIT_WAIT_S = 120.0  # at most: a load takes about a second, minutes on a starved machine
_pending: Future | None = None  # its result: (the settings it loaded for, as JSON; the embedder), or None


def start(settings: Any) -> None:
    """Begin loading the model the start-up will want, in a daemon thread. Never raises."""
    global _pending
    future: Future = Future()

    def load() -> None:
        try:
            loaded = _load(settings)
        except BaseException as exc:  # the start-up loads again, and reports its own error
            future.set_exception(exc)
            return
        future.set_result(loaded)
        if loaded is not None:  # the start-up goes on with the model; what it can do without comes after
            try:
                loaded[1].finish()
            except Exception:
                log.warning("finishing the embedding model's load failed; it runs without what was left",
                            exc_info=True)

    _pending = future
    thread = threading.Thread(target=load, name="embedder-early", daemon=True)
    thread.start()
    # A process that exits (a refusal, a taken port) while the thread is inside native code aborts
    # ("terminate called without an active exception", exit 134 instead of the refusal's 1): wait for it.
    atexit.register(thread.join, EXIT_WAIT_S)


def _load(settings: Any) -> tuple[str, Any] | None:
    from ragengine.embedding.core import PACKAGE_PREFIX, build_embedder, choose_backend
    from ragengine.embedding.pool import ModelRef, read_target

    target = ModelRef.from_settings(settings)
    if settings.embedding_file is not None and settings.embedding_file.exists():
        target, _ = read_target(settings.embedding_file, settings)
    wanted = target.settings_for(settings)
    model = wanted.embedding_model
    if (choose_backend(wanted)[0] == "torch" and wanted.embedding_backend == "auto" and wanted.device != "cuda"
            and not model.startswith(PACKAGE_PREFIX) and os.path.isdir(model)):
        return None  # a folder to export first: that writes, so it waits for the start-up's checks
    return wanted.model_dump_json(), build_embedder(wanted, defer=True)


async def take(wanted: Any) -> Any | None:
    """The model loaded early for ``wanted`` (once), or None: none was started, it failed, or it was loaded
    for other settings (then it is closed)."""
    global _pending
    future, _pending = _pending, None
    if future is None:
        return None
    try:
        loaded = await asyncio.wrap_future(future)
    except Exception as exc:
        log.info("the early load of the embedding model failed (%s: %s); loading it again", type(exc).__name__, exc)
        return None
    if loaded is None:
        return None
    key, embedder = loaded
    if key != wanted.model_dump_json():
        embedder.close()
        return None
    return embedder

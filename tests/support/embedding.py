"""The run's one loaded embedding model, lent to each in-process engine.

Every in-process app (``create_app`` on ``serve_app``) gets ``borrowed(embedder)``: an ``Embedder`` over
the session's already loaded model (the root conftest's ``embedder`` fixture) with its own thread pools
and query batcher, because each uvicorn server runs its own event loop and the batcher's futures belong
to one loop. Closing it leaves the model loaded. So the model loads once per pytest process; each
``ragengine serve`` process (tests/support/engine_process.py) loads its own copy, as a deployed engine does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ragengine.embedding import Embedder


class Borrowed(Embedder):
    """An engine's own Embedder over a shared, already loaded model: closing it leaves the model loaded."""

    def close(self) -> None:
        self._docs_pool.shutdown(wait=False, cancel_futures=True)
        self._query_pool.shutdown(wait=False, cancel_futures=True)


@contextlib.contextmanager
def borrowed(shared: Embedder) -> Iterator[Embedder]:
    emb = Borrowed(shared.backend)
    try:
        yield emb
    finally:
        emb.close()


@contextlib.contextmanager
def serve_engine(app, shared: Embedder) -> Iterator[str]:
    """``serve_app(app)`` with ``borrowed(shared)`` as its embedder; yields the base URL."""
    from tests.support.server import serve_app

    with borrowed(shared) as own:
        app.state.embedder = own
        with serve_app(app) as base:
            yield base

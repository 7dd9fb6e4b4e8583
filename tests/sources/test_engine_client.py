"""The sync's engine client repeats a refused connect (found on the real node: kube-router refuses a new pod's
first packets for about a second, so a sync Job that pushed at once was refused on every retry, each in a new
pod) and gives up with the engine's reason once its grace is spent."""

from __future__ import annotations

import threading

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from ragengine_operator.sources.engine import EngineClient, EngineUnavailable
from tests.operator.integration.kube import wait_for
from tests.support.server import bound_socket, refused_port, serve_app


def _documents(_request) -> JSONResponse:
    return JSONResponse({"documents": [], "total_items": 0})


ENGINE = Starlette(routes=[Route("/indexes/{name}/documents", _documents)])


def test_a_refused_connect_is_repeated_until_the_engine_answers():
    sock = bound_socket()  # bound, not listening: connects are refused until the server starts on it
    client = EngineClient(f"http://127.0.0.1:{sock.getsockname()[1]}")
    answer: list[bool] = []
    asking = threading.Thread(target=lambda: answer.append(client.has_index("docs")))
    asking.start()
    # the engine starts listening only after the client was refused twice (no timing involved)
    wait_for(lambda: client.refused >= 2, 30, "two refused connects")
    with serve_app(ENGINE, sock=sock, ready_path="/indexes/x/documents"):
        asking.join(timeout=60)
    assert answer == [True] and client.refused >= 2
    client.close()


def test_an_engine_that_never_listens_is_unavailable_after_the_grace():
    with refused_port() as port:
        client = EngineClient(f"http://127.0.0.1:{port}", connect_grace_s=1.0)
        with pytest.raises(EngineUnavailable, match=r"engine unreachable: .*Connection refused"):
            client.has_index("docs")
        assert client.refused >= 1
        client.close()

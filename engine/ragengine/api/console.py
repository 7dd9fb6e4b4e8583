"""The console's routes: the page and its files under ``/ui/`` (open: they hold no data, only code that asks
the API with the user's key), and ``GET /whoami``, which tells the page what its principal may see and do."""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from ragengine import console
from ragengine.access.enforce import principal_of, visible_to
from ragengine.errors import NotFound
from ragengine.protocol.console import Features, WhoAmI
from ragengine.protocol.errors import error_responses

router = APIRouter(tags=["console"])
pages = APIRouter(tags=["console"])  # only when settings.console_enabled
EVALUATIONS = ("GET", "/indexes/{index_name}/evaluations")


def features(operations: Iterable[tuple[str, str]]) -> dict[str, bool]:
    """The optional APIs this engine serves, from its routes (``create_app`` keeps it on app.state)."""
    return {"evaluations": EVALUATIONS in set(operations)}


@router.get("/whoami", response_model=WhoAmI)
async def whoami(request: Request) -> WhoAmI:
    principal = principal_of(request)
    names = await request.app.state.registry.list_names()
    llm = getattr(request.app.state, "llm", None)
    return WhoAmI(principal=principal.name, kind=principal.kind, role=principal.role.name,
                  auth=request.app.state.access.enabled, indexes=[n for n in names if visible_to(request, n)],
                  features=Features(llm=bool(llm is not None and llm.configured),
                                    **getattr(request.app.state, "features", {"evaluations": False})))


def _send(asset: console.Asset | None, name: str, request: Request) -> Response:
    if asset is None:
        raise NotFound(f"No such console file: '{name}'.")
    headers = {**console.HEADERS, "ETag": asset.etag}
    if request.headers.get("if-none-match") == asset.etag:
        return Response(status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.media_type, headers=headers)


@pages.get("/ui", status_code=307, response_class=RedirectResponse,
           responses={307: {"description": "To ui/ (relative: a path prefix is kept)."}})
async def console_root() -> RedirectResponse:
    # Relative, so an Ingress that serves the engine under a path prefix keeps it (/kb/ui -> /kb/ui/).
    return RedirectResponse("ui/", status_code=307, headers=console.HEADERS)


@pages.get("/ui/", response_class=Response, responses={200: {"description": "The console's page.",
                                                               "content": {"text/html": {}}}})
async def console_page(request: Request) -> Response:
    return _send(console.page(request.app.state.access.enabled), console.PAGE, request)


@pages.get("/ui/assets/{name}", response_class=Response, responses={
    200: {"description": "A script or stylesheet of the console.", "content": {"text/javascript": {}, "text/css": {}}},
    **error_responses(404)})
async def console_asset(name: str, request: Request) -> Response:
    return _send(console.assets().get(name), name, request)

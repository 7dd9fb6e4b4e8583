"""The names and ids a request may carry, and their rules. Pure.

``api.names.check_names`` applies these to every request before its route's handler (and before access
control looks anything up), so no layer below ever acts on a name it cannot hold: an index name that
would not fit a folder name (FAISS, the version books), an id with a NUL that PostgreSQL refuses, a
name longer than its database column. A bad one is a 400 naming the parameter.

``PATH_PARAMETERS`` has every path parameter of the API: ``create_app`` refuses a route whose path
names a parameter missing from it, so a route added later is checked without doing anything.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

from ragengine.errors import BadRequest

MAX_INDEX_NAME = 200
# An index is a folder named after its quoted name (and a version book a file); file systems allow 255
# bytes a name, and snapshots add ".tmp" / ".old" beside it. Non-ASCII characters quote to 6 to 12 bytes.
MAX_QUOTED_INDEX_NAME = 240
MAX_ID = 64  # sessions, threads, files, batches, responses: the engine's ids and their database columns


def folder_name(name: str) -> str:
    """An index's folder name: its name URL-quoted (a leading '.' too, so no index is a hidden folder)."""
    quoted = quote(name, safe="-_.")
    return "%2E" + quoted[1:] if quoted.startswith(".") else quoted


def _printable(value: str) -> bool:
    return not any(ord(c) < 32 or c == "\x7f" for c in value)


def index_name(name: object, param: str | None = None) -> str:
    """An index's name (a vector store's id is one too): 1 to 200 printable characters, no '/' (every
    index stays addressable as ``/indexes/{index_name}``), not '.' or '..', 240 bytes at most URL-quoted."""
    if not isinstance(name, str) or not name.strip():
        raise BadRequest("Index name cannot be empty.", param=param)
    if len(name) > MAX_INDEX_NAME or not _printable(name):
        raise BadRequest(f"Invalid index name: at most {MAX_INDEX_NAME} printable characters.", param=param)
    if "/" in name or name in (".", ".."):
        raise BadRequest(f"Invalid index name {name!r}: '/', '.' and '..' are not allowed.", param=param)
    if len(folder_name(name)) > MAX_QUOTED_INDEX_NAME:
        raise BadRequest(f"Invalid index name: {len(folder_name(name))} bytes once URL-quoted (the folder name), "
                         f"at most {MAX_QUOTED_INDEX_NAME}; a non-ASCII character counts 6 to 12 bytes.", param=param)
    return name


def object_id(kind: str) -> Callable[[object, str | None], str]:
    """The check of one kind of id (``session_id``, ...): 1 to 64 printable characters. The engine's own ids
    are ``<prefix>_<32 hex>``; a thread may be named by its client (``new_thread_id``, 64 at most)."""
    def check(value: object, param: str | None = None) -> str:
        if not isinstance(value, str) or not value or len(value) > MAX_ID or not _printable(value):
            raise BadRequest(f"Invalid {kind}: 1 to {MAX_ID} printable characters.", param=param or kind)
        return value

    return check


def vector_store_id(value: object, param: str | None = None) -> str:
    """A vector store's id is its index's name."""
    return index_name(value, param or "vector_store_id")


# None: a parameter FastAPI converts and bounds itself (its route declares ``Path(ge=..., le=...)``).
PATH_PARAMETERS: dict[str, Callable[[object, str | None], str] | None] = {
    "index_name": index_name,
    "vector_store_id": vector_store_id,
    "session_id": object_id("session_id"),
    "thread_id": object_id("thread_id"),
    "file_id": object_id("file_id"),
    "batch_id": object_id("batch_id"),
    "response_id": object_id("response_id"),
    "evaluation_id": object_id("evaluation_id"),
    "other_id": object_id("other_id"),
    "version": None,
    "name": object_id("name"),  # the console's files (/ui/assets/{name}): a 404 past the few it has
}


def check_path(params: dict[str, str]) -> None:
    """Every path parameter of a request, by its rule (a 400 naming the first bad one)."""
    for key, value in params.items():
        check = PATH_PARAMETERS[key]
        if check is not None:
            check(value, key)


def unchecked(parameters: list[str]) -> list[str]:
    """The path parameters that have no rule here (``create_app`` refuses to start with any)."""
    return sorted(p for p in parameters if p not in PATH_PARAMETERS)

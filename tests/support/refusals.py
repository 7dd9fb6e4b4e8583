"""Requests the engine must refuse, generated with Hypothesis from the engine's own route table.

Every mutating route has a ``Route`` (``tests/support/refused_routes.py``): an accepted request (``base``:
what a client allowed to would send, on the objects ``World`` holds) and the faults only that route has (a
conflict, a missing copy, a damaged export). ``faults(key, route, world)`` adds what every route can get
wrong, derived from the route itself, so a route added tomorrow gets them too:

- ``role``: a principal the route's access rule (``access/routes.py``) refuses: no key, an unknown key, a
  role below the route's; on routes of owned objects (sessions, uploads, responses, all the admin's) any
  other principal, for whom they do not exist;
- ``bad <param>``: a path parameter its rule refuses: too long, control characters, only spaces, a
  non-ASCII name too long for a folder, '.' and '..' (never a '/': ``%2F`` is decoded before routing, so
  it names another route, not a bad name);
- ``missing <param>``: a well-formed id of nothing (not on routes that create what they name);
- ``malformed body``, ``not an object``, ``wrong type <field>``, ``oversized body`` for routes with a body.

Each fault is a strategy of ``Call``s, each of them one request with exactly that fault.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import strategies as st

from ragengine.access.routes import ROUTES
from ragengine.access.rules import Role

NOTHING = object()
RANK = {"nobody": 0, "stranger": 0, "reader": 1, "writer": 2, "admin": 3}
ROLE_RANK = {Role.read: 1, Role.write: 2, Role.admin: 3}
OWNED_IDS = ("session_id", "file_id", "response_id")
INDEX_PARAMS = ("index_name", "vector_store_id")


@dataclass(frozen=True)
class Call:
    method: str
    template: str  # the route's path, as in the route table
    path_params: dict[str, Any] = field(default_factory=dict)
    role: str = "admin"
    params: dict[str, Any] | None = None
    json: Any = NOTHING
    content: bytes | None = None
    content_type: str | None = None
    files: list | None = None
    data: dict[str, Any] | None = None

    @property
    def path(self) -> str:
        return self.template.format(**{k: quote(str(v), safe="") for k, v in self.path_params.items()})

    def send(self, base: str, keys: dict[str, str]) -> httpx.Response:
        headers = {"Authorization": f"Bearer {keys[self.role]}"} if self.role in keys else {}
        if self.content_type:
            headers["Content-Type"] = self.content_type
        kwargs: dict[str, Any] = {"params": self.params, "files": self.files, "data": self.data}
        if self.json is not NOTHING:
            kwargs["json"] = self.json
        if self.content is not None:
            kwargs["content"] = self.content
        return httpx.request(self.method, base + self.path, headers=headers, timeout=120, **kwargs)

    def describe(self) -> str:
        body = self.json if self.json is not NOTHING else (self.content[:80] if self.content is not None else self.data)
        return f"{self.method} {self.path[:120]} as {self.role} params={self.params} body={str(body)[:200]}"


@dataclass(frozen=True)
class Route:
    """``base``: an accepted request on ``World``'s objects; ``faults``: the route's own faults (name -> Calls)."""

    base: Callable[[Any], Call]
    faults: Callable[[Any], dict[str, st.SearchStrategy[Call]]] = lambda _world: {}
    creates: tuple[str, ...] = ()  # path parameters that name what the route creates: never "missing"


@dataclass(frozen=True)
class World:
    """What the seed made (every object the admin's), and the engine's limits."""

    index: str  # versions: live and retired
    other: str  # a second index, never named by the requests
    live: int
    retired: int
    doc_ids: tuple[str, ...]
    export: bytes  # of ``index``
    copies: dict[str, str]  # FAISS /persist folders: good, damaged, notacopy
    file: str  # attached to ``session``, in ``batch``
    failed_file: str  # its text could not be read
    store: str
    store_file: str
    batch: str
    session: str
    message: str
    thread: str
    response: str
    limits: dict[str, int]  # body, import, upload, document


# -- generic values ---------------------------------------------------------------------------------------
def bad_index_names() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(201, 400).map(lambda n: "n" * n),
        st.integers(41, 120).map(lambda n: "é" * n),  # 200 characters at most, but over 240 bytes quoted
        st.sampled_from(["\x00", "kb\x00", "a\x01b", "kb\x7f", "kb\n", "\t", " ", "   ", ".", ".."]),
    )


def bad_ids() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(65, 300).map(lambda n: "s" * n),
        st.integers(65, 100).map(lambda n: "é" * n),
        st.sampled_from(["\x00", "sess_\x00", "a\x01b", "x\x7f", "\n", " "]),
    )


def hex_ids(prefix: str) -> st.SearchStrategy[str]:
    return st.text("0123456789abcdef", min_size=32, max_size=32).map(lambda h: f"{prefix}_{h}")


MISSING: dict[str, st.SearchStrategy[Any]] = {
    "index_name": st.text(string.ascii_lowercase, min_size=1, max_size=8).map(lambda s: f"ghost-{s}"),
    "vector_store_id": st.text(string.ascii_lowercase, min_size=1, max_size=8).map(lambda s: f"ghost-{s}"),
    "session_id": hex_ids("sess"),
    "thread_id": hex_ids("thr"),
    "file_id": hex_ids("file"),
    "batch_id": hex_ids("vsfb"),
    "response_id": hex_ids("resp"),
    "version": st.integers(50, 1_000_000),
}


def wrong_type(value: Any) -> Any:
    """A JSON value no field typed like ``value`` accepts."""
    return {"not": ["a list"]} if isinstance(value, list) else [[1, 2]]


# -- the faults every route can have -----------------------------------------------------------------------
def _roles(key: tuple[str, str], base: Call) -> list[str]:
    rule = ROUTES[(key[0].upper(), key[1])]
    needed = ROLE_RANK[rule.role] if rule.role is not None else 0
    roles = [r for r in ("nobody", "stranger", "reader", "writer") if RANK[r] < needed]
    if rule.owned and any(p in base.path_params for p in OWNED_IDS):
        roles += [r for r in ("reader", "writer") if r not in roles]  # the admin's objects: none of theirs
    return roles


def _body_faults(base: Call, limit: int) -> dict[str, st.SearchStrategy[Call]]:
    out: dict[str, st.SearchStrategy[Call]] = {}
    if base.json is not NOTHING:
        out["malformed body"] = st.sampled_from([b'{"documents": [', b"{", b'{"a": 1}}', b"\xff\xfe{}"]).map(
            lambda raw: replace(base, json=NOTHING, content=raw, content_type="application/json"))
        out["not an object"] = st.one_of(st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2),
                                         st.none()).map(lambda v: replace(base, json=v))
        if isinstance(base.json, dict) and base.json:
            out["wrong type of a field"] = st.sampled_from(sorted(base.json)).map(
                lambda k: replace(base, json={**base.json, k: wrong_type(base.json[k])}))
    if base.json is not NOTHING or base.files is not None or base.content is not None:
        out["oversized body"] = st.integers(1, 4096).map(lambda extra: replace(
            base, json=NOTHING, files=None, data=None, content=b'{"x": "' + b"a" * (limit + extra) + b'"}',
            content_type="application/json"))
    return out


def faults(key: tuple[str, str], route: Route, world: Any) -> dict[str, st.SearchStrategy[Call]]:
    """Every fault of one route: the route's own, then the ones its shape implies."""
    base = route.base(world)
    out = dict(route.faults(world))
    roles = _roles(key, base)
    if roles:
        out["role"] = st.sampled_from(roles).map(lambda r: replace(base, role=r))
    for param in base.path_params:
        if param in INDEX_PARAMS:
            bad: st.SearchStrategy[Any] = bad_index_names()
        elif param == "version":
            bad = st.sampled_from(["0", "-1", "x", "1.5", str(10**7), "99999999999999999999"])
        else:
            bad = bad_ids()
        out[f"bad {param}"] = bad.map(lambda v, p=param: replace(base, path_params={**base.path_params, p: v}))
        if param not in route.creates:
            out[f"missing {param}"] = MISSING[param].map(
                lambda v, p=param: replace(base, path_params={**base.path_params, p: v}))
    limit = world.limits["import" if key[1].endswith("/import") else "body"]
    out.update(_body_faults(base, limit))
    return out

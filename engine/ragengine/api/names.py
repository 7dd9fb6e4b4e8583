"""The one check of the names and ids a request carries, before anything else of the route runs.

``check_names`` is the first app-wide dependency (``create_app``): before access control looks a session
or file up, before any handler, store or version layer acts, every path parameter passes its rule
(``protocol.names.PATH_PARAMETERS``), and so does every index the request names in its body (read as
access control reads it: ``access.enforce.indexes_named``). A bad one is a 400 that names it, and
nothing has happened yet.

A route added later is covered without a line here: its path parameters must have a rule in
``PATH_PARAMETERS`` (``create_app`` refuses to start otherwise) and its access rule says where its index
comes from.
"""

from __future__ import annotations

from fastapi import Request

from ragengine.access.enforce import indexes_named
from ragengine.access.routes import rule_for
from ragengine.protocol import names


async def check_names(request: Request) -> None:
    names.check_path(request.path_params)
    rule = rule_for("GET" if request.method == "HEAD" else request.method, request.scope["route"].path)
    if rule.open:
        return
    for index in await indexes_named(request, rule.index):
        if index is not None:
            names.index_name(index, "vector_store_ids" if rule.index.value == "tools" else "index_name")

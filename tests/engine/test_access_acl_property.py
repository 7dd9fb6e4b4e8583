"""Random document ACLs × random principals, on every store: no document ever reaches a principal its ACL
does not admit, and every document it admits is found (the ACL is a filter before top-k, not a cut after).

A seeded generator (reproducible: the seed is in the test id) makes each index: ACLs drawn from valid
entries, malformed entries and malformed shapes, or none. The oracle below is this test's own statement of
the rule (docs/access.md), written independently of ``retrieval.filters``: no ``acl`` key → everyone; a
list of at most 256 strings, each ``group:`` or ``user:`` followed by at least one character and at most
512 characters in all → those principals; anything else → nobody.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from ragengine.access.acl import Acl
from ragengine.index.documents import content_id

GROUPS = ["ops", "dev", "sec", "o'p\"s"]
USERS = ["app-a", "app-b", "shop/frontend", "x\\y"]
VALID = [f"group:{g}" for g in GROUPS] + [f"user:{u}" for u in USERS]
BAD_ENTRIES = [5, None, True, "grp:ops", "group:", "user:", "Group:ops", " group:ops", ["group:ops"], {"g": 1},
               "group:" + "o" * 507]
BAD_SHAPES = ["group:ops", None, 3, {"group": "ops"}, True]
ENTRY = re.compile(r"(group|user):.+", re.S)
N_DOCS, N_PRINCIPALS, DIM_SEED = 60, 12, 7


def oracle(metadata: dict, tokens: set[str]) -> bool:
    if "acl" not in metadata:
        return True
    acl = metadata["acl"]
    if type(acl) is not list or len(acl) > 256:
        return False
    if not all(type(e) is str and len(e) <= 512 and ENTRY.fullmatch(e) for e in acl):
        return False
    return bool(tokens & set(acl))


def random_acl(rng: random.Random) -> tuple[bool, object]:
    """(has an acl, the acl)"""
    roll = rng.random()
    if roll < 0.15:
        return False, None
    if roll < 0.25:
        return True, rng.choice(BAD_SHAPES)
    entries: list = rng.sample(VALID, rng.randint(0, 3))
    if roll < 0.4:
        entries.insert(rng.randint(0, len(entries)), rng.choice(BAD_ENTRIES))
    return True, entries


def random_tokens(rng: random.Random) -> set[str]:
    groups = rng.sample(GROUPS, rng.randint(0, 2))
    return {f"user:{rng.choice(USERS)}", *(f"group:{g}" for g in groups)}


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_acls_never_leak(seed, vector_store, store_settings, embedder, tmp_path):
    from ragengine.settings import EngineSettings
    from ragengine.versions import build_registry

    rng = random.Random(seed)
    settings = EngineSettings(data_dir=tmp_path / "data", **store_settings)
    registry = build_registry(settings, embedder)
    await registry.start()
    try:
        texts, metas = [], []
        for i in range(N_DOCS):
            has, acl = random_acl(rng)
            texts.append(f"pump restart procedure number {i} for the cooling loop")
            metas.append({"n": i, **({"acl": acl} if has else {})})
        vectors = np.random.default_rng(seed).standard_normal((N_DOCS, embedder.dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        await registry.add_precomputed("prop", texts, vectors, metas)
        query = np.random.default_rng(seed + 100).standard_normal(embedder.dim).astype(np.float32)
        gone = set(rng.sample(range(N_DOCS), N_DOCS // 4))
        for round_ in range(N_PRINCIPALS):
            if round_ == N_PRINCIPALS // 2:  # halfway: deletions (tombstones in FAISS) must not come back
                await registry.delete_documents("prop", [content_id(texts[i]) for i in sorted(gone)])
            tokens = random_tokens(rng)
            live = gone if round_ < N_PRINCIPALS // 2 else set()
            admitted = {i for i, m in enumerate(metas) if oracle(m, tokens) and (i in live or i not in gone)}
            acl = Acl(tuple(sorted(tokens)))
            nodes = await registry.retrieve("prop", "pump restart cooling loop", N_DOCS, query_embedding=query, acl=acl)
            got = [n.metadata["n"] for n in nodes]
            assert set(got) <= admitted, (tokens, sorted(set(got) - admitted))  # no leak, in any position
            assert set(got) == admitted, (tokens, sorted(admitted - set(got)))  # and nothing admitted is lost
            page = await registry.list_documents("prop", limit=100, acl=acl)
            assert {d["metadata"]["n"] for d in page["documents"]} == admitted and page["total_items"] == len(admitted)
    finally:
        await registry.close()

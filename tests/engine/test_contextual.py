"""Contextual chunks (title + section path in the embedded and BM25 text) and document-level results."""

from __future__ import annotations

import random
import re

import httpx
import pytest

from ragengine.index.chunking import Chunker
from ragengine.index.contextual import (
    CONTEXT_MAX_CHARS,
    CONTEXT_TOKENS,
    atx_heading,
    contextual_text,
    headings,
    index_texts,
    section_path,
)
from ragengine.index.types import ChunkingConfig
from ragengine.retrieval.grouping import cap_per_document
from tests.support.bounded import run_under_cpu_limit

MARKDOWN = """# Guide

Intro text.

## Install

```
# a comment in code, not a heading
```

### Linux

Run the installer.

## Use

Setext heading
--------------

Body.
"""

RST = """=======
 Title
=======

Section
-------

text

Sub
~~~

deep text
"""


def test_markdown_headings_and_paths():
    heads = headings(MARKDOWN)
    assert [(level, title) for _, level, title in heads] == [
        (1, "Guide"), (2, "Install"), (3, "Linux"), (2, "Use"), (2, "Setext heading")]
    assert section_path(heads, MARKDOWN.index("Run the")) == ["Guide", "Install", "Linux"]
    assert section_path(heads, MARKDOWN.index("Body.")) == ["Guide", "Setext heading"]
    assert section_path(heads, 0) == ["Guide"]


def test_rst_levels_follow_the_order_of_adornment_styles():
    heads = headings(RST)
    assert [(level, title) for _, level, title in heads] == [(1, "Title"), (2, "Section"), (3, "Sub")]
    assert section_path(heads, RST.index("deep text")) == ["Title", "Section", "Sub"]


# The ATX regex the linear scan replaced (issue 22): the reference for what a heading is.
OLD_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")


def test_linear_atx_scan_agrees_with_the_regex_it_replaced():
    rng = random.Random(22)
    lines = [" # a", "#", "# ", "#  ", "# ##", "# foo ##", "# foo#", "# foo # #", "####### x", "    # x",
             "#\tfoo\t#\t", "## a  ##  ", "# a\x0c##"]
    lines += ["".join(rng.choice(" \t#ab\x0c") for _ in range(rng.randint(0, 12))) for _ in range(20_000)]
    for line in lines:
        old = OLD_ATX.match(line)
        new = atx_heading(line)
        assert (None if old is None else (len(old.group(1)), old.group(2).strip())) == (
            None if new is None else (new[0], new[1].strip())), repr(line)


def test_heading_scan_is_linear_on_hostile_lines():
    """A 30 KB heading line (the review's request that froze /health for 15 s) and a 1 MB one
    (hours with the old regex): both go through headings() and the contextual texts within a CPU-time
    limit that only a blow-up reaches (the kernel kills the child there)."""
    code = (
        "from ragengine.index.contextual import headings, index_texts\n"
        "for n in (30_000, 1_000_000):\n"
        "    text = '# a' + ' ' * n + 'b\\n\\nbody text\\n'\n"
        "    assert [(lvl, t[:1], t[-1:]) for _, lvl, t in headings(text)] == [(1, 'a', 'b')]\n"
        "    assert len(index_texts(text, {'title': 'T'}, None, contextual=True)) == 1\n"
        "print('ok')\n"
    )
    done = run_under_cpu_limit(code, cpu_s=30)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])


def test_plain_text_has_no_headings():
    assert headings("Just a paragraph.\n\nAnd another one - with a dash.\n") == []


def test_contextual_text():
    assert contextual_text("Manual", ["Manual", "Install"], "chunk") == "Manual > Install\n\nchunk"
    assert contextual_text(None, [], "chunk") == "chunk"
    long = contextual_text("t" * 500, [], "chunk")
    assert len(long.split("\n\n")[0]) == CONTEXT_MAX_CHARS and long.endswith("\n\nchunk")


def test_index_texts_per_chunk():
    start = MARKDOWN.index("Run the")
    spans = [(0, 10), (start, start + 17)]
    plain = index_texts(MARKDOWN, {"title": "Handbook"}, spans, contextual=False)
    assert plain == ["# Guide\n\nI", "Run the installer"]
    ctx = index_texts(MARKDOWN, {"title": "Handbook"}, spans, contextual=True)
    assert ctx == ["Handbook > Guide\n\n# Guide\n\nI", "Handbook > Guide > Install > Linux\n\nRun the installer"]
    # code is left alone; the whole-text form (spans None) works
    assert index_texts("x = 1", {"title": "T", "split_type": "code"}, None, contextual=True) == ["x = 1"]
    assert index_texts("body", {"title": "T"}, None, contextual=True) == ["T\n\nbody"]


def test_contextual_chunks_leave_room_for_their_prefix(embedder):
    plain = Chunker(embedder, ChunkingConfig())
    ctx = Chunker(embedder, ChunkingConfig(contextual=True))
    assert ctx.limit == plain.limit - CONTEXT_TOKENS
    assert ctx.config.chunk_size <= ctx.limit


def test_cap_per_document():
    ranked = ["a1", "a2", "b1", "a3", "c1", "b2"]
    assert cap_per_document(ranked, 1, lambda x: x[0]) == ["a1", "b1", "c1"]
    assert cap_per_document(ranked, 2, lambda x: x[0]) == ["a1", "a2", "b1", "c1", "b2"]
    assert cap_per_document(ranked, None, lambda x: x[0]) == ranked
    with pytest.raises(ValueError):
        cap_per_document(ranked, 0, lambda x: x[0])


# -- over HTTP ---------------------------------------------------------------------------------------
MANUAL = {"doc_id": "manual", "metadata": {"title": "Zorblax appliance manual"},
          "text": "# Installation\n\n## Wiring\n\nConnect the red cable to the left terminal and the blue one to the right.\n"}
OTHER = {"doc_id": "other", "text": "Bread needs flour, water, salt and time to rise before baking."}


def _retrieve(base: str, index: str, query: str, **extra) -> dict:
    resp = httpx.post(f"{base}/retrieve", json={"index_name": index, "query": query, "max_node_count": 5, **extra},
                      timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _hits(out: dict) -> dict:
    return {r["doc_id"]: r for r in out["results"]}


def test_contextual_index_finds_a_chunk_by_its_title_and_returns_the_chunk_alone(make_server):
    with make_server() as (base, _):
        for name, contextual in (("ctx", True), ("plain", False)):
            resp = httpx.post(f"{base}/index", json={"index_name": name, "documents": [MANUAL, OTHER],
                                                     "chunking": {"contextual": contextual}}, timeout=60)
            assert resp.status_code == 200, resp.text
        hit = _hits(_retrieve(base, "ctx", "zorblax"))["manual"]
        assert hit["sparse_score"] is not None  # the title's word is in the chunk's BM25 text
        assert hit["text"] == MANUAL["text"].strip() and "Zorblax" not in hit["text"]
        assert _hits(_retrieve(base, "plain", "zorblax"))["manual"]["sparse_score"] is None
        # the section path is in it too, and the embedding moved towards the title
        assert _hits(_retrieve(base, "ctx", "installation wiring"))["manual"]["sparse_score"] is not None
        assert (_hits(_retrieve(base, "ctx", "Zorblax appliance"))["manual"]["dense_score"]
                > _hits(_retrieve(base, "plain", "Zorblax appliance"))["manual"]["dense_score"])

    # Restart (snapshot at shutdown, reload): the index keeps its chunking and its BM25 text.
    with make_server() as (base, _):
        assert _hits(_retrieve(base, "ctx", "zorblax"))["manual"]["sparse_score"] is not None
        deleted = httpx.post(f"{base}/indexes/ctx/documents/delete", json={"doc_ids": ["manual"]}, timeout=30)
        assert deleted.json()["deleted_doc_ids"] == ["manual"]
        assert all(r["sparse_score"] is None for r in _retrieve(base, "ctx", "zorblax")["results"])


def test_title_change_re_embeds_a_contextual_chunk(make_server):
    with make_server() as (base, _):
        httpx.post(f"{base}/index", json={"index_name": "ctx", "documents": [MANUAL],
                                           "chunking": {"contextual": True}}, timeout=60).raise_for_status()
        renamed = {**MANUAL, "metadata": {"title": "Quuxifier handbook"}}
        httpx.post(f"{base}/indexes/ctx/documents", json={"documents": [renamed]}, timeout=60).raise_for_status()
        assert _hits(_retrieve(base, "ctx", "quuxifier"))["manual"]["sparse_score"] is not None
        assert _hits(_retrieve(base, "ctx", "zorblax"))["manual"]["sparse_score"] is None


def test_max_chunks_per_document(make_server):
    long_doc = {"doc_id": "long", "text": " ".join(
        f"Sourdough note {i}: the starter rises when the dough is kept warm and fed with flour." for i in range(40))}
    short_doc = {"doc_id": "short", "text": "A sourdough starter is flour and water fermented by wild yeast."}
    with make_server() as (base, _):
        httpx.post(f"{base}/index", json={"index_name": "bread", "documents": [long_doc, short_doc],
                                           "chunking": {"chunk_size": 32, "chunk_overlap": 0}}, timeout=60).raise_for_status()
        free = _retrieve(base, "bread", "how does the sourdough starter rise?")
        assert [r["doc_id"] for r in free["results"]].count("long") >= 4
        capped = _retrieve(base, "bread", "how does the sourdough starter rise?", max_chunks_per_document=1)
        assert sorted(r["doc_id"] for r in capped["results"]) == ["long", "short"]
        two = _retrieve(base, "bread", "how does the sourdough starter rise?", max_chunks_per_document=2)
        assert [r["doc_id"] for r in two["results"]].count("long") == 2
        bad = httpx.post(f"{base}/retrieve", json={"index_name": "bread", "query": "x", "max_chunks_per_document": 0})
        assert bad.status_code == 422 and "max_chunks_per_document" in bad.text


def test_contextual_bm25_postings_survive_delete_and_compaction():
    """IndexState adds, removes and rebuilds BM25 postings from the same contextual text."""
    import numpy as np

    from ragengine.index.state import IndexState

    dim = 8
    state = IndexState("t", dim, ChunkingConfig(contextual=True), {"hnsw_threshold": 10_000})
    rng = np.random.default_rng(0)

    def adds(ids):
        out = [{"id": d, "text": f"# Part {d}\n\nplain body words {d}", "meta": {"title": f"Title{d}"},
                "spans": [[0, len(f"# Part {d}\n\nplain body words {d}")]]} for d in ids]
        vecs = rng.standard_normal((len(ids), dim)).astype(np.float32)
        return out, vecs / np.linalg.norm(vecs, axis=1, keepdims=True)

    def docs_for(term):
        slots, _ = state.bm25.search(term, 10, state.store.alive)
        return sorted(state.chunk(int(s))[0].doc_id for s in slots)

    ops, vecs = adds(["a", "b", "c"])
    state.apply({"add": ops}, vecs)
    assert docs_for("titleb") == ["b"] and docs_for("plain") == ["a", "b", "c"]
    state.apply({"delete": ["b"]}, None)
    assert docs_for("titleb") == [] and state.bm25.df[state.bm25.vocab["titleb"]] == 0
    state.compact()  # renumbers slots and rebuilds BM25 from the contextual texts
    assert docs_for("titlec") == ["c"] and docs_for("part") == ["a", "c"]

"""The index, version and conversation routes that change what the engine holds: an accepted request on the
seeded ``World`` and the faults that are the route's own (``tests/support/refusals.py`` adds those every
route has; ``refused_v1_routes.py`` has the vector stores and responses). The property test fails for a
mutating route missing from both, so a new route cannot be skipped silently.

``READ_ONLY`` are the routes that take a body (POST) but store nothing: searches, chat answers, MCP's transport.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from tests.support.refusals import Call, Route, World, bad_index_names, hex_ids

READ_ONLY = frozenset({("post", "/retrieve"), ("post", "/v1/chat/completions"), ("post", "/v1/chat/reformulate"),
                       ("post", "/v1/vector_stores/{vector_store_id}/search"),
                       # MCP's transport: its tools only read (search, fetch, list_indexes); a DELETE ends the
                       # caller's protocol session, which lives in the process's memory, not in any store
                       ("post", "/mcp"), ("delete", "/mcp")})
BAD_PATHS = ["/etc", "../indexes", "..", ".hidden", "a/b", "copy.tmp", "copy.old", " copy", "x\x00y", "p" * 300]


def _docs(texts: list[str], **extra: Any) -> list[dict]:
    return [{"text": t, **extra} for t in texts]


def index_routes() -> dict[tuple[str, str], Route]:
    def add(w: World) -> Call:
        return Call("POST", "/index", role="writer", json={"index_name": w.index, "documents": _docs(["A new note."])})

    def add_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = add(w)
        return {
            "bad index_name in the body": bad_index_names().map(lambda n: replace(base, json={**base.json, "index_name": n})),
            "empty text": st.sampled_from(["", " ", "\n\t"]).map(
                lambda t: replace(base, json={**base.json, "documents": [{"text": "ok"}, {"text": t}]})),
            "text too long": st.integers(1, 100).map(lambda n: replace(base, json={
                **base.json, "documents": [{"text": "ok"}, {"text": "x" * (w.limits["document"] + n)}]})),
            "code without a language": st.just(replace(base, json={**base.json, "documents": [
                {"text": "def f(): pass", "metadata": {"split_type": "code"}}]})),
            "an existing doc_id with other text": st.sampled_from(w.doc_ids).map(lambda d: replace(base, json={
                **base.json, "documents": [{"doc_id": "fresh-one", "text": "fine"}, {"doc_id": d, "text": "changed"}]})),
            "a new index with bad chunking": st.sampled_from([{"chunk_size": -1}, {"chunk_overlap": -5}]).map(
                lambda c: replace(base, json={"index_name": "brand-new", "documents": _docs(["x"]), "chunking": c})),
        }

    def files(w: World) -> Call:
        return Call("POST", "/index/files", role="writer", data={"index_name": w.index},
                    files=[("files", ("note.md", b"# Note\n\nA file of the index.", "text/markdown"))])

    def files_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = files(w)
        return {
            "a type that cannot be indexed": st.sampled_from([b"MZ\x90\x00\x03", b"\x7fELF\x02\x01"]).map(
                lambda raw: replace(base, files=[("files", ("ok.md", b"fine", "text/markdown")),
                                                 ("files", ("x.bin", raw, "application/x-msdownload"))])),
            "metadata not JSON": st.sampled_from(["{", "[1]", "nope"]).map(
                lambda m: replace(base, data={**base.data, "metadata": m})),
            "bad index_name in the form": bad_index_names().map(lambda n: replace(base, data={"index_name": n})),
            "too large": st.just(replace(base, files=[("files", ("big.txt", b"y" * (w.limits["upload"] + 1), "text/plain"))])),
        }

    def update(w: World) -> Call:
        return Call("POST", "/indexes/{index_name}/documents", {"index_name": w.index}, role="writer",
                    json={"documents": [{"doc_id": w.doc_ids[0], "text": "Rewritten."}]})

    def update_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = update(w)
        return {"no doc_id": st.just(replace(base, json={"documents": [{"doc_id": w.doc_ids[0], "text": "ok"},
                                                                       {"text": "no id"}]})),
                "empty text": st.sampled_from(["", "  "]).map(lambda t: replace(base, json={
                    "documents": [{"doc_id": w.doc_ids[0], "text": "ok"}, {"doc_id": w.doc_ids[1], "text": t}]}))}

    def metadata(w: World) -> Call:
        return Call("POST", "/indexes/{index_name}/documents/metadata", {"index_name": w.index}, role="writer",
                    json={"documents": [{"doc_id": w.doc_ids[0], "metadata": {"i": 99}}]})

    def metadata_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        ok = {"doc_id": w.doc_ids[0], "metadata": {"i": 99}}
        return {"a document without its id or metadata": st.sampled_from([
                    {"metadata": {"i": 1}}, {"doc_id": "", "metadata": {}}, {"doc_id": w.doc_ids[1]},
                    {"doc_id": w.doc_ids[1], "metadata": ["not", "an object"]}]).map(
                    lambda bad: replace(metadata(w), json={"documents": [ok, bad]})),
                "code without a language": st.just(replace(metadata(w), json={"documents": [
                    ok, {"doc_id": w.doc_ids[1], "metadata": {"split_type": "code"}}]})),
                "too many documents": st.just(replace(metadata(w), json={"documents": [ok] * 1001}))}

    def persist(w: World) -> Call:
        return Call("POST", "/persist/{index_name}", {"index_name": w.index}, params={"path": "fresh-copy"})

    def persist_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        return {"bad path": st.sampled_from([*BAD_PATHS, w.copies["notacopy"]]).map(
            lambda p: replace(persist(w), params={"path": p}))}

    def load(w: World) -> Call:
        return Call("POST", "/load/{index_name}", {"index_name": w.index},
                    params={"path": w.copies["good"], "overwrite": "true"})

    def load_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = load(w)
        paths = [*BAD_PATHS, "missing-copy", w.copies["damaged"], w.copies["notacopy"]]
        return {"bad, missing or damaged copy": st.tuples(st.sampled_from(paths), st.sampled_from(["true", "false"])).map(
                    lambda a: replace(base, params={"path": a[0], "overwrite": a[1]})),
                "an existing index without overwrite": st.sampled_from([w.index, w.other]).map(
                    lambda n: replace(base, path_params={"index_name": n}, params={"path": w.copies["good"]}))}

    return {
        ("post", "/index"): Route(add, add_faults),
        ("post", "/index/files"): Route(files, files_faults),
        ("post", "/indexes/{index_name}/documents"): Route(update, update_faults),
        ("post", "/indexes/{index_name}/documents/metadata"): Route(metadata, metadata_faults),
        ("post", "/indexes/{index_name}/documents/delete"): Route(lambda w: Call(
            "POST", "/indexes/{index_name}/documents/delete", {"index_name": w.index}, role="writer",
            json={"doc_ids": [w.doc_ids[0]]})),
        ("delete", "/indexes/{index_name}"): Route(lambda w: Call("DELETE", "/indexes/{index_name}", {"index_name": w.index})),
        ("post", "/persist/{index_name}"): Route(persist, persist_faults),
        ("post", "/load/{index_name}"): Route(load, load_faults, creates=("index_name",)),
    }


def version_routes() -> dict[tuple[str, str], Route]:
    def reindex(w: World) -> Call:
        return Call("POST", "/indexes/{index_name}/reindex", {"index_name": w.index}, role="writer",
                    json={"chunking": {"chunk_size": 96}})

    def reindex_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = reindex(w)
        # models that fail at once (a hub name costs a torch import first: a minute on a busy machine)
        return {"a model it cannot load": st.sampled_from(["package:nope", "wordllama:nope"]).map(
                    lambda m: replace(base, json={"embedding_model": m})),
                "an unknown field": st.just(replace(base, json={"chunking": {"chunk_size": 96}, "speed": "fast"})),
                "bad chunking": st.sampled_from([{"chunk_size": -1}, {"chunk_overlap": -2}]).map(
                    lambda c: replace(base, json={"chunking": c}))}

    def activate(w: World) -> Call:
        return Call("POST", "/indexes/{index_name}/versions/{version}/activate",
                    {"index_name": w.index, "version": w.retired})

    def drop(w: World) -> Call:
        return Call("DELETE", "/indexes/{index_name}/versions/{version}", {"index_name": w.index, "version": w.retired})

    def import_(w: World) -> Call:
        return Call("POST", "/indexes/{index_name}/import", {"index_name": "imported"}, role="writer",
                    content=w.export, content_type="application/gzip")

    def import_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = import_(w)
        n = len(w.export)
        return {"an existing index": st.sampled_from([w.index, w.other]).map(
                    lambda name: replace(base, path_params={"index_name": name})),
                "truncated": st.integers(0, n - 1).map(lambda k: replace(base, content=w.export[:k])),
                "a flipped byte": st.tuples(st.integers(0, n - 1), st.integers(1, 255)).map(lambda a: replace(
                    base, content=w.export[:a[0]] + bytes([w.export[a[0]] ^ a[1]]) + w.export[a[0] + 1:])),
                "not an export": st.binary(max_size=200).map(lambda b: replace(base, content=b)),
                "oversized": st.just(replace(base, content=b"\x1f\x8b" + b"z" * (w.limits["import"] + 1)))}

    return {
        ("post", "/indexes/{index_name}/reindex"): Route(reindex, reindex_faults),
        ("post", "/indexes/{index_name}/versions/{version}/activate"): Route(activate, lambda w: {
            "the live version": st.just(replace(activate(w), path_params={"index_name": w.index, "version": w.live}))}),
        ("delete", "/indexes/{index_name}/versions/{version}"): Route(drop, lambda w: {
            "the live version": st.just(replace(drop(w), path_params={"index_name": w.index, "version": w.live}))}),
        ("post", "/indexes/{index_name}/import"): Route(import_, import_faults, creates=("index_name",)),
    }


def evaluation_routes() -> dict[tuple[str, str], Route]:
    def question(i: int, doc_id: str) -> dict:
        return {"id": f"q{i}", "question": f"Which pier has a ferry at {i + 8}:00?", "relevant_doc_ids": [doc_id]}

    def run(w: World) -> Call:
        return Call("POST", "/indexes/{index_name}/evaluations", {"index_name": w.index}, role="writer",
                    json={"questions": [question(0, w.doc_ids[0])], "top_k": 3})

    def run_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = run(w)
        return {
            "not a golden set": st.sampled_from([[], [question(0, w.doc_ids[0]), question(0, w.doc_ids[1])],
                                                 [{**question(0, w.doc_ids[0]), "question": "  "}],
                                                 [{**question(0, w.doc_ids[0]), "relevant_doc_ids": []}],
                                                 [{**question(0, w.doc_ids[0]), "answer": "x"}]]).map(
                lambda qs: replace(base, json={**base.json, "questions": qs})),
            "a version it does not have": st.integers(50, 10_000).map(
                lambda v: replace(base, json={**base.json, "version": v})),
            "bad retrieval settings": st.sampled_from([{"top_k": 0}, {"top_k": 100_000}, {"min_score": 2},
                                                       {"filters": {"type": "like", "key": "i", "value": 1}}]).map(
                lambda extra: replace(base, json={**base.json, **extra})),
        }

    def golden_set(w: World) -> Call:
        line = json.dumps({"id": "q1", "question": "Which pier has a ferry at 8:00?", "relevant_doc_ids": [w.doc_ids[0]]})
        return Call("PUT", "/indexes/{index_name}/evaluations/golden-set", {"index_name": w.index}, role="writer",
                    json={"source": "docs", "path": "eval/golden.jsonl", "revision": "r1", "text": line})

    def golden_set_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = golden_set(w)
        return {"a file that is not a golden set": st.sampled_from(
                    ["", "# only a comment", "not json", '{"id": "q1"}', '{"id": "q1", "question": "x", '
                     '"relevant_doc_ids": ["a"]}\n{"id": "q1", "question": "y", "relevant_doc_ids": ["b"]}']).map(
                    lambda text: replace(base, json={**base.json, "text": text})),
                "an unknown field": st.just(replace(base, json={**base.json, "index": w.other}))}

    return {
        ("post", "/indexes/{index_name}/evaluations"): Route(run, run_faults),
        # A source's sync hands a golden set over for the index it fills, which may not exist yet: a missing
        # index is accepted there (docs/evaluation.md), as a create route's name is.
        ("put", "/indexes/{index_name}/evaluations/golden-set"): Route(golden_set, golden_set_faults,
                                                                       creates=("index_name",)),
    }


def conversation_routes() -> dict[tuple[str, str], Route]:
    def upload(w: World) -> Call:
        return Call("POST", "/v1/files", role="reader", data={"purpose": "assistants"},
                    files=[("file", ("notes.md", b"# Notes\n\nUploaded.", "text/markdown"))])

    def upload_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = upload(w)
        return {"too large": st.integers(1, 100).map(lambda n: replace(
                    base, files=[("file", ("big.txt", b"y" * (w.limits["upload"] + n), "text/plain"))])),
                "a bad purpose or expiry": st.sampled_from([{"purpose": "nonsense"}, {"expires_after[anchor]": "created_at",
                                                             "expires_after[seconds]": "10"}]).map(
                    lambda d: replace(base, data=d)),
                "a session not the caller's": st.one_of(st.just(w.session), hex_ids("sess")).map(
                    lambda s: replace(base, data={"session_id": s}))}

    def session(w: World) -> Call:
        return Call("POST", "/v1/sessions", role="reader", json={"title": "new", "index_name": w.index})

    def session_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = session(w)
        return {"the conversations index": st.just(replace(base, json={"index_name": "conversations"})),
                "files not the caller's": st.sampled_from([[w.file], [w.file, "file_missing"]]).map(
                    lambda ids: replace(base, json={**base.json, "file_ids": ids})),
                "a bad index name": bad_index_names().map(lambda n: replace(base, json={"index_name": n})),
                "a title too long": st.integers(513, 600).map(lambda n: replace(base, json={"title": "t" * n}))}

    def message(w: World) -> Call:
        return Call("POST", "/v1/sessions/{session_id}/messages", {"session_id": w.session}, json={"content": "Hi?"})

    def message_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = message(w)
        branch = {"content": "Branch?", "parent_message_id": w.message}
        return {
            "another session in the body": hex_ids("sess").map(lambda s: replace(base, json={"content": "x", "session_id": s})),
            "a missing thread": st.sampled_from(["nope", "thr_missing"]).map(
                lambda t: replace(base, json={"content": "x", "thread_id": t})),
            "a missing parent message": hex_ids("msg").map(
                lambda m: replace(base, json={"content": "x", "parent_message_id": m})),
            "a branch with a missing file": hex_ids("file").map(
                lambda f: replace(base, json={**branch, "file_ids": [w.file, f]})),
            "a branch onto an existing thread": st.sampled_from(["main", w.thread]).map(
                lambda t: replace(base, json={**branch, "thread_id": t})),
            "a message with a missing file": hex_ids("file").map(lambda f: replace(base, json={"content": "x", "file_ids": [f]})),
            "an empty or contradictory message": st.sampled_from([{"content": " "}, {"content": "x", "use_rag": False,
                                                                  "mode": "rag"}, {"content": "x", "mode": "psychic"}]).map(
                lambda b: replace(base, json=b)),
        }

    def attach(w: World) -> Call:
        return Call("POST", "/v1/sessions/{session_id}/files", {"session_id": w.session}, json={"file_ids": [w.file]})

    def thread(w: World) -> Call:
        return Call("POST", "/v1/sessions/{session_id}/threads", {"session_id": w.session},
                    json={"parent_message_id": w.message, "new_thread_id": "another"})

    return {
        ("post", "/v1/files"): Route(upload, upload_faults),
        ("delete", "/v1/files/{file_id}"): Route(lambda w: Call("DELETE", "/v1/files/{file_id}", {"file_id": w.file})),
        ("post", "/v1/sessions"): Route(session, session_faults),
        ("delete", "/v1/sessions/{session_id}"): Route(lambda w: Call("DELETE", "/v1/sessions/{session_id}",
                                                                      {"session_id": w.session})),
        ("post", "/v1/sessions/{session_id}/messages"): Route(message, message_faults),
        ("post", "/v1/sessions/{session_id}/files"): Route(attach, lambda w: {"a missing file": hex_ids("file").map(
            lambda f: replace(attach(w), json={"file_ids": [w.file, f]}))}),
        ("delete", "/v1/sessions/{session_id}/files/{file_id}"): Route(lambda w: Call(
            "DELETE", "/v1/sessions/{session_id}/files/{file_id}", {"session_id": w.session, "file_id": w.file}),
            lambda w: {"a file not attached": st.just(Call("DELETE", "/v1/sessions/{session_id}/files/{file_id}",
                                                           {"session_id": w.session, "file_id": w.store_file}))}),
        ("post", "/v1/sessions/{session_id}/threads"): Route(thread, lambda w: {
            "a missing parent": hex_ids("msg").map(lambda m: replace(thread(w), json={"parent_message_id": m})),
            "a thread that exists": st.sampled_from(["main", w.thread]).map(
                lambda t: replace(thread(w), json={"parent_message_id": w.message, "new_thread_id": t})),
            "a bad thread id": st.sampled_from(["a b", "x/y", "t" * 65, ""]).map(
                lambda t: replace(thread(w), json={"parent_message_id": w.message, "new_thread_id": t}))}),
    }

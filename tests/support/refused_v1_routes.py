"""OpenAI's vector stores and responses that change what the engine holds: an accepted request on the seeded
``World`` and the route's own faults (see ``refused_routes.py``)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from tests.support.refusals import Call, Route, World, bad_index_names, hex_ids

STORE = "/v1/vector_stores/{vector_store_id}"


def vector_store_routes() -> dict[tuple[str, str], Route]:
    def create(w: World) -> Call:
        return Call("POST", "/v1/vector_stores", role="writer", json={"name": "new", "index_name": "new-store"})

    def create_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = create(w)
        return {
            "an index that exists": st.sampled_from([w.store, w.index, w.other]).map(
                lambda n: replace(base, json={"name": "dup", "index_name": n})),
            "the conversations index": st.just(replace(base, json={"index_name": "conversations"})),
            "a bad index name": bad_index_names().map(lambda n: replace(base, json={"index_name": n})),
            "files missing, failed or not the caller's": st.sampled_from(
                [[w.store_file, "file_missing"], [w.failed_file], [w.file]]).map(
                lambda ids: replace(base, json={**base.json, "file_ids": ids})),
            "a bad chunking strategy or expiry": st.sampled_from([
                {"chunking_strategy": {"type": "static", "static": {"max_chunk_size_tokens": 10, "chunk_overlap_tokens": 0}}},
                {"chunking_strategy": {"type": "wavy"}}, {"expires_after": {"anchor": "last_active_at", "days": 0}},
                {"metadata": {f"k{i}": "v" for i in range(17)}}]).map(lambda extra: replace(base, json={**base.json, **extra})),
        }

    def update(w: World) -> Call:
        return Call("POST", STORE, {"vector_store_id": w.store}, role="writer", json={"name": "renamed"})

    def attach(w: World) -> Call:
        return Call("POST", f"{STORE}/files", {"vector_store_id": w.store}, json={"file_id": w.file})

    def attach_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = attach(w)
        return {"a file missing or failed": st.one_of(hex_ids("file"), st.just(w.failed_file)).map(
                    lambda f: replace(base, json={"file_id": f})),
                "another's file": st.just(replace(base, role="writer")),  # the admin's upload
                "bad attributes": st.sampled_from([{"file_id": "x"}, {"acl": "everyone"}, {"k": [1]}]).map(
                    lambda a: replace(base, json={"file_id": w.file, "attributes": a})),
                "an index with no store record": st.just(replace(base, path_params={"vector_store_id": w.other},
                                                                 json={"file_id": "file_missing"}))}

    def update_file(w: World) -> Call:
        return Call("POST", f"{STORE}/files/{{file_id}}", {"vector_store_id": w.store, "file_id": w.store_file},
                    role="writer", json={"attributes": {"topic": "new"}})

    def detach(w: World) -> Call:
        return Call("DELETE", f"{STORE}/files/{{file_id}}", {"vector_store_id": w.store, "file_id": w.store_file},
                    role="writer")

    def batch(w: World) -> Call:
        return Call("POST", f"{STORE}/file_batches", {"vector_store_id": w.store}, json={"file_ids": [w.file]})

    def cancel(w: World) -> Call:
        return Call("POST", f"{STORE}/file_batches/{{batch_id}}/cancel", {"vector_store_id": w.store, "batch_id": w.batch},
                    role="writer")

    return {
        ("post", "/v1/vector_stores"): Route(create, create_faults),
        ("post", STORE): Route(update, lambda w: {"a bad expiry or metadata": st.sampled_from([
            {"expires_after": {"anchor": "created_at", "days": 3}}, {"metadata": {"k": 5}}, {"name": "n" * 513}]).map(
            lambda b: replace(update(w), json=b))}),
        ("delete", STORE): Route(lambda w: Call("DELETE", STORE, {"vector_store_id": w.store})),
        ("post", f"{STORE}/files"): Route(attach, attach_faults),
        ("post", f"{STORE}/files/{{file_id}}"): Route(update_file, lambda w: {
            "a file not in the store": st.just(replace(update_file(w), path_params={"vector_store_id": w.store,
                                                                                    "file_id": w.failed_file})),
            "bad attributes": st.sampled_from([{"filename": "x"}, {"k" * 65: 1}, {"n": float("1e300")}]).map(
                lambda a: replace(update_file(w), json={"attributes": a}))}),
        ("delete", f"{STORE}/files/{{file_id}}"): Route(detach, lambda w: {"a file not in the store": st.just(
            replace(detach(w), path_params={"vector_store_id": w.store, "file_id": w.failed_file}))}),
        ("post", f"{STORE}/file_batches"): Route(batch, lambda w: {
            "a missing or failed file among good ones": st.one_of(hex_ids("file"), st.just(w.failed_file)).map(
                lambda f: replace(batch(w), json={"file_ids": [w.file, f]})),
            "files and file_ids both, or a bad entry": st.sampled_from([
                {"file_ids": [w.file], "files": [{"file_id": w.file}]}, {"files": [{"attributes": {}}]}]).map(
                lambda b: replace(batch(w), json=b))}),
        ("post", f"{STORE}/file_batches/{{batch_id}}/cancel"): Route(cancel, lambda w: {
            "a batch of another store": st.just(replace(cancel(w), path_params={"vector_store_id": w.index,
                                                                                "batch_id": w.batch}))}),
    }


def response_routes() -> dict[tuple[str, str], Route]:
    def create(w: World) -> Call:
        return Call("POST", "/v1/responses", role="reader", json={
            "input": "What does FAISS search?", "tools": [{"type": "file_search", "vector_store_ids": [w.store]}]})

    def create_faults(w: World) -> dict[str, st.SearchStrategy[Call]]:
        base = create(w)
        tools = base.json["tools"]
        return {
            "a missing store": st.tuples(st.sampled_from(["ghost", "conversations"]), st.booleans()).map(
                lambda a: replace(base, json={**base.json, "stream": a[1], "tools": [
                    {"type": "file_search", "vector_store_ids": [w.store, a[0]]}]})),
            "a bad store id": bad_index_names().map(lambda n: replace(
                base, json={**base.json, "tools": [{"type": "file_search", "vector_store_ids": [n]}]})),
            "a missing previous response": st.tuples(hex_ids("resp"), st.booleans()).map(lambda a: replace(
                base, json={**base.json, "previous_response_id": a[0], "stream": a[1]})),
            "another's previous response": st.just(replace(base, json={**base.json, "previous_response_id": w.response})),
            "a bad tool or input": st.sampled_from([
                {"input": "x", "tools": [{"type": "web_search"}]}, {"input": "", "tools": tools},
                {"input": [{"role": "user", "content": 5}], "tools": tools},
                {"input": "x", "tools": [{"type": "file_search"}]},
                {"input": "x", "tools": tools, "temperature": 9}]).map(lambda b: replace(base, json=b)),
        }

    return {
        ("post", "/v1/responses"): Route(create, create_faults),
        ("delete", "/v1/responses/{response_id}"): Route(lambda w: Call("DELETE", "/v1/responses/{response_id}",
                                                                        {"response_id": w.response})),
    }

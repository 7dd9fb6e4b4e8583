"""A refused request changes nothing (issue 47), on each store: the defects found, as their reproductions.

- ``POST /load/kb?path=/etc&overwrite=true`` answered 400 after the version layer had deleted ``kb``; a
  missing copy (404) did the same, and on PostgreSQL and Milvus, where ``/load`` is always a 400, so did
  every ``/load`` with ``overwrite``.
- ``POST /indexes/{257 characters}/versions/1/activate`` answered 500 (``OSError: File name too long``
  from the version books): names and ids are now checked once, before any route acts (``api/names.py``).

The property over every mutating route is ``test_refused_property.py``; crashes inside the admin
operations are ``test_admin_crash.py``.
"""

from __future__ import annotations

import json

import httpx
import pytest

DOCS = [{"doc_id": f"d{i}", "text": f"Document {i} on the ferry timetable of pier {i}.", "metadata": {"i": i}}
        for i in range(4)]


def _index(base: str, name: str = "kb") -> None:
    resp = httpx.post(f"{base}/index", json={"index_name": name, "documents": DOCS}, timeout=120)
    assert resp.status_code == 200, resp.text


def _documents(base: str, name: str = "kb") -> list[tuple[str, str]]:
    page = httpx.get(f"{base}/indexes/{name}/documents", params={"limit": 100}, timeout=60)
    assert page.status_code == 200, page.text
    return sorted((d["doc_id"], d["text"]) for d in page.json()["documents"])


def test_a_refused_load_with_overwrite_leaves_the_index_as_it_was(make_server, store_settings):
    with make_server() as (base, _app):
        _index(base)
        before = _documents(base)
        for path in ("/etc", "../indexes", ".hidden", "missing-copy"):
            resp = httpx.post(f"{base}/load/kb", params={"path": path, "overwrite": "true"}, timeout=60)
            assert resp.status_code in (400, 404), resp.text
            assert httpx.get(f"{base}/indexes").json() == ["kb"], f"/load?path={path} answered {resp.status_code}"
            assert _documents(base) == before
        versions = httpx.get(f"{base}/indexes/kb/versions").json()
        assert versions["live_version"] == 1 and len(versions["versions"]) == 1


@pytest.mark.stores("faiss")  # /persist and /load are the embedded store's
def test_a_damaged_copy_is_refused_before_the_index_is_touched(make_server, settings):
    with make_server() as (base, _app):
        _index(base)
        assert httpx.post(f"{base}/persist/kb", params={"path": "copy"}).status_code == 200
        manifest = settings.data_dir / "persist" / "copy" / "manifest.json"
        manifest.write_text(manifest.read_text()[:-20])  # cut short
        resp = httpx.post(f"{base}/load/kb", params={"path": "copy", "overwrite": "true"}, timeout=60)
        assert resp.status_code == 400 and "Loading failed" in resp.json()["detail"], resp.text
        assert _documents(base) == sorted((d["doc_id"], d["text"]) for d in DOCS)


@pytest.mark.stores("faiss")
def test_a_load_with_overwrite_replaces_every_version_in_one_step(make_server, settings):
    with make_server() as (base, _app):
        _index(base)
        assert httpx.post(f"{base}/persist/kb", params={"path": "copy"}).status_code == 200
        resp = httpx.post(f"{base}/indexes/kb/documents/delete", json={"doc_ids": ["d0", "d1"]})
        assert resp.status_code == 200, resp.text
        resp = httpx.post(f"{base}/load/kb", params={"path": "copy", "overwrite": "true"}, timeout=60)
        assert resp.status_code == 200, resp.text
        assert _documents(base) == sorted((d["doc_id"], d["text"]) for d in DOCS)
        versions = httpx.get(f"{base}/indexes/kb/versions").json()
        assert [(v["version"], v["state"], v["documents"]) for v in versions["versions"]] == [(1, "live", 4)]
        hits = httpx.post(f"{base}/retrieve", json={"index_name": "kb", "query": "pier 2", "max_node_count": 1})
        assert hits.status_code == 200 and hits.json()["results"][0]["doc_id"] == "d2"
    with make_server() as (base, _app):  # after a restart: the loaded copy alone, the old files gone
        assert _documents(base) == sorted((d["doc_id"], d["text"]) for d in DOCS)
        assert len([p for p in (settings.data_dir / "indexes").iterdir() if not p.name.startswith(".")]) == 1


LONG = "n" * 257
ROUTES_WITH_A_NAME = [
    ("POST", f"/indexes/{LONG}/versions/1/activate", None),
    ("DELETE", f"/indexes/{LONG}/versions/1", None),
    ("POST", f"/indexes/{LONG}/reindex", {}),
    ("POST", f"/indexes/{LONG}/import", None),
    ("POST", f"/indexes/{LONG}/documents", {"documents": []}),
    ("GET", f"/indexes/{LONG}/versions", None),
    ("GET", f"/indexes/{LONG}/reindex", None),
    ("GET", f"/indexes/{LONG}/export", None),
    ("POST", f"/load/{LONG}", None),
    ("POST", f"/persist/{LONG}", None),
    ("DELETE", f"/indexes/{LONG}", None),
    ("GET", f"/v1/vector_stores/{LONG}", None),
    ("GET", "/v1/sessions/" + "s" * 65, None),
    ("DELETE", "/v1/files/" + "f" * 65, None),
    ("GET", "/v1/responses/resp_%00", None),
]


def test_a_name_or_id_too_long_is_a_400_on_every_route_never_a_500(make_server):
    with make_server() as (base, _app):
        _index(base)
        for method, path, body in ROUTES_WITH_A_NAME:
            resp = httpx.request(method, f"{base}{path}", json=body, timeout=60)
            assert resp.status_code == 400, (method, path[:60], resp.status_code, resp.text[:300])
            body_ = resp.json()
            message = body_["error"]["message"] if path.startswith("/v1/") else body_["detail"]
            assert "Invalid" in message, message
        assert httpx.get(f"{base}/indexes").json() == ["kb"]


def test_with_access_control_on_a_bad_name_is_its_400_before_any_role_or_lookup(make_server, tmp_path):
    """Access control decides before the body is read (``access.enforce.AccessGate``), outside FastAPI's
    dependencies, so it applies the names' rules first (protocol/names.py): a key scoped to other indexes and
    below most routes' role gets the same 400, never the 404 of an index it may not see, a 403 for its role,
    or a session looked up by an id no session can have."""
    reader = "scoped-reader-0123456789abcdef"
    (tmp_path / "access.yaml").write_text(json.dumps({"keys": [
        {"name": "scoped", "key": reader, "indexes": ["team-*"], "role": "read"}]}))
    with make_server(api_key="admin-key-0123456789abcdef", access_file=tmp_path / "access.yaml") as (base, _app):
        for method, path, body in ROUTES_WITH_A_NAME:
            resp = httpx.request(method, f"{base}{path}", json=body, timeout=60,
                                 headers={"Authorization": f"Bearer {reader}"})
            assert resp.status_code == 400, (method, path[:60], resp.status_code, resp.text[:300])
            assert resp.headers["connection"] == "close"  # answered before the body was read

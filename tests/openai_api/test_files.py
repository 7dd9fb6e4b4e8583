"""``/v1/files`` in OpenAI's shape through the SDK (purpose, cursor pagination, expiry), with the fields the
engine's own clients read still there."""

from __future__ import annotations

import io

import httpx
import openai
import pytest

from tests.openai_api.conftest import API_KEY, wait_for

pytestmark = pytest.mark.stores("faiss")  # the uploads live in the session store, whatever the vector store


def test_upload_retrieve_and_delete_in_openais_shape(engine):
    c = engine.client()
    f = c.files.create(file=("notes.md", io.BytesIO(b"# Notes\n\nPumps need oil.")), purpose="assistants")
    assert (f.object, f.filename, f.bytes, f.purpose, f.status) == ("file", "notes.md", 24, "assistants", "uploaded")
    assert isinstance(f.created_at, int) and f.expires_at is None
    done = wait_for(lambda: (g := c.files.retrieve(f.id)).status == "processed" and g, "the file to be processed")
    # what the engine's clients read before OpenAI's shape
    assert (done.model_extra["file_id"], done.model_extra["ingestion_status"], done.model_extra["documents"]) == \
        (f.id, "completed", 1)
    gone = c.files.delete(f.id)
    assert (gone.id, gone.deleted, gone.object) == (f.id, True, "file")
    with pytest.raises(openai.NotFoundError):
        c.files.retrieve(f.id)


def test_cursor_pagination_after_before_limit_order(engine):
    c = engine.client()
    purpose = "user_data"  # this test's files only
    made = [c.files.create(file=(f"p{i}.txt", io.BytesIO(f"page {i}".encode())), purpose=purpose) for i in range(5)]
    ids = [f.id for f in made]
    assert [f.id for f in c.files.list(purpose=purpose)] == ids[::-1]  # newest first, as on OpenAI
    first = c.files.list(purpose=purpose, limit=2, order="asc")
    assert ([f.id for f in first.data], first.has_more) == (ids[:2], True)
    assert [f.id for f in c.files.list(purpose=purpose, limit=2, order="asc", after=ids[1]).data] == ids[2:4]
    last = c.files.list(purpose=purpose, limit=2, order="asc", after=ids[3])
    assert ([f.id for f in last.data], last.has_more) == ([ids[4]], False)
    # ``before`` (the vector store lists' cursor; files.list of the SDK has none) walks back
    assert [f.id for f in c.files.list(purpose=purpose, limit=10, order="asc", extra_query={"before": ids[2]}).data] \
        == ids[:2]
    back = c.files.list(purpose=purpose, limit=1, order="desc", extra_query={"before": ids[2]})
    assert ([f.id for f in back.data], back.has_more) == ([ids[3]], True)
    assert [f.id for f in c.files.list(purpose=purpose, limit=2)] == ids[::-1]  # the SDK follows the cursor
    raw = httpx.get(f"{engine.base}/v1/files", params={"purpose": purpose, "limit": 2},
                    headers={"Authorization": f"Bearer {API_KEY}"}).json()
    assert (raw["object"], raw["first_id"], raw["last_id"], raw["has_more"]) == ("list", ids[4], ids[3], True)


def test_expires_after_sets_expires_at(engine):
    c = engine.client()
    f = c.files.create(file=("tmp.txt", io.BytesIO(b"temporary")), purpose="assistants",
                       expires_after={"anchor": "created_at", "seconds": 3600})
    assert f.expires_at is not None and 3599 <= f.expires_at - f.created_at <= 3601
    with pytest.raises(openai.BadRequestError):
        c.files.create(file=("tmp.txt", io.BytesIO(b"temporary")), purpose="assistants",
                       expires_after={"anchor": "created_at", "seconds": 60})


def test_upload_without_purpose_still_works_for_the_engines_clients(engine):
    r = httpx.post(f"{engine.base}/v1/files", files={"file": ("old.txt", b"Legacy client upload.", "text/plain")},
                   headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 202
    body = r.json()
    assert (body["file_id"], body["ingestion_status"], body["purpose"]) == (body["id"], "uploaded", "assistants")

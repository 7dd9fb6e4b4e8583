"""The pure bookkeeping of source syncs: when a source is due, its status entry, SourcesSynced, Events;
and the data-volume retention rules of the builders."""

from __future__ import annotations

from ragengine_operator import constants as c
from ragengine_operator.manifests.labels import Owner
from ragengine_operator.reconcile.plan import name_conflict, plan
from ragengine_operator.sources.status import (
    WAITING_FOR_ENGINE,
    SourceState,
    after_sync,
    due,
    sources_condition,
    spec_digest,
    sync_event,
    sync_requests,
    syncing,
    visible,
    waiting,
)
from ragengine_operator.sources.sync import SyncResult
from ragengine_operator.spec import RAGEngineSpec
from ragengine_operator.spec.sources import Source

CM = Source.model_validate({"name": "faq", "configMap": {"name": "faq"}})
GIT = Source.model_validate({"name": "docs", "interval": "1h", "git": {"url": "https://git.example/docs.git"}})
T0 = 1_800_000_000.0


def ok(revision: str = "r1", written: int = 3, message: str = "3 added") -> SyncResult:
    return SyncResult("s", "git", ok=True, revision=revision, documents=3, chunks=7, written=written, message=message)


def failed(message: str = "repository unreachable") -> SyncResult:
    return SyncResult("s", "git", ok=False, message=message)


def test_schedule_new_changed_failed_and_periodic():
    assert due(GIT, None, T0)
    synced = after_sync(GIT, None, ok(), T0)
    assert not due(GIT, synced, T0 + 3599) and due(GIT, synced, T0 + 3600)  # its interval
    cm = after_sync(CM, None, ok(), T0)
    assert not due(CM, cm, T0 + 29) and due(CM, cm, T0 + 30)  # a ConfigMap's default: 30 s
    edited = Source.model_validate({**GIT.model_dump(by_alias=True), "git": {"url": "https://git.example/docs.git",
                                                                             "ref": "v2"}})
    assert spec_digest(edited) != spec_digest(GIT) and due(edited, synced, T0 + 1)  # spec changed: at once
    first = after_sync(GIT, synced, failed(), T0)
    second = after_sync(GIT, first, failed(), T0 + 5)
    assert (first.failures, second.failures) == (1, 2)
    assert not due(GIT, second, T0 + 5 + 9.9) and due(GIT, second, T0 + 5 + 10)  # backoff 5 s, 10 s, ...
    assert second.revision == "r1" and not second.synced  # the last good revision is kept


def test_waiting_for_the_engine_counts_no_failure_and_retries_at_once():
    state = waiting(GIT, None, T0)
    assert state.message == WAITING_FOR_ENGINE and state.failures == 0 and due(GIT, state, T0)


def test_an_unchanged_check_keeps_the_status_as_it_is():
    synced = after_sync(GIT, None, ok(), T0)
    checked = after_sync(GIT, synced, SyncResult("docs", "git", ok=True, revision="r1", message="up to date"), T0 + 3600)
    assert visible(checked) == visible(synced) and checked.last_attempt == T0 + 3600
    assert sync_event(GIT, synced, checked, 0) is None


def test_status_entry_round_trips_through_a_restart():
    state = after_sync(GIT, None, ok(), T0)
    entry = state.to_status(GIT)
    assert entry["type"] == "git" and entry["index"] == "docs" and entry["revision"] == "r1" and entry["synced"]
    back = SourceState.from_status(entry)
    assert visible(back) == visible(state) and back.last_sync == T0 and not due(GIT, back, T0 + 60)


def test_sources_synced_condition():
    assert sources_condition([], []) is None
    good = after_sync(GIT, None, ok(), T0).to_status(GIT)
    bad = after_sync(CM, None, failed("ConfigMap faq not found"), T0).to_status(CM)
    cond = sources_condition([GIT], [good])
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "Synced"
    cond = sources_condition([GIT, CM], [good, bad])
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "SyncFailed"
    assert "faq: ConfigMap faq not found" in cond["message"]
    cond = sources_condition([GIT, CM], [good])
    assert cond is not None and cond["reason"] == "Progressing" and "faq: not synced yet" in cond["message"]
    under_way = syncing(CM, None, "syncing 1234: 64 of 1000 documents written", T0).to_status(CM)
    cond = sources_condition([GIT, CM], [good, under_way])
    assert cond is not None and cond["reason"] == "Progressing" and "64 of 1000" in cond["message"]
    assert sync_event(CM, None, SourceState.from_status(under_way), 64) is None
    edited = Source.model_validate({**GIT.model_dump(by_alias=True), "interval": "2h"})
    cond = sources_condition([edited], [good])
    assert cond is not None and cond["status"] == "False" and "spec changed" in cond["message"]


def test_events_for_news_only():
    first = after_sync(GIT, None, ok(), T0)
    assert sync_event(GIT, None, first, 3) == ("Normal", "SourceSynced", "source docs at r1: 3 added")
    broken = after_sync(GIT, first, failed(), T0 + 1)
    assert sync_event(GIT, first, broken, 0)[:2] == ("Warning", "SourceSyncFailed")
    again = after_sync(GIT, broken, failed(), T0 + 10)
    assert sync_event(GIT, broken, again, 0) is None  # the same failure is not news
    assert sync_event(GIT, None, waiting(GIT, None, T0), 0) is None


OWNER = Owner("ns", "rag", "uid-1")


def test_retained_volumes_have_no_owner_and_are_adopted_by_name():
    def claims(policy: str) -> list[dict]:
        spec = RAGEngineSpec.model_validate({"inference": {"model": "m"}, "storage": {"volume": {"reclaimPolicy": policy}}})
        return [o for o in plan(OWNER, spec).apply if o["kind"] == "PersistentVolumeClaim"]

    assert len(claims("Retain")) == 2 and all("ownerReferences" not in o["metadata"] for o in claims("Retain"))
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == "uid-1" for o in claims("Delete"))
    assert RAGEngineSpec().storage.volume.reclaim_policy == "Retain"
    left = {**claims("Retain")[0], "metadata": {**claims("Retain")[0]["metadata"], "uid": "pvc-uid"}}
    assert name_conflict(left, OWNER) is None  # a RAGEngine of the same name adopts it
    assert name_conflict(left, Owner("ns", "other", "uid-2")) is not None  # another name does not
    foreign = {"kind": "PersistentVolumeClaim", "metadata": {"name": "rag-data", "labels": {c.SELECTOR_NAME: "rag"}}}
    assert name_conflict(foreign, OWNER) is not None  # not made by this operator


def test_a_sync_request_is_due_at_once_until_handled_even_in_backoff():
    requests = sync_requests({c.SYNC_NOW_ANNOTATION: "2026-11-28T12:00:00Z", f"{c.SOURCE_SYNC_ANNOTATION_PREFIX}docs": "d-1",
                              "unrelated": "x"}, ["docs", "faq"])
    assert requests == {"docs": "2026-11-28T12:00:00Z|d-1", "faq": "2026-11-28T12:00:00Z|"}
    failing = after_sync(GIT, None, SyncResult("docs", "git", ok=False, message="unreachable"), T0)
    failing = after_sync(GIT, failing, SyncResult("docs", "git", ok=False, message="unreachable"), T0)
    assert not due(GIT, failing, T0 + 1)  # in backoff
    assert due(GIT, failing, T0 + 1, requests["docs"])  # a request skips it
    handled = SourceState(**{**failing.__dict__, "handled_request": requests["docs"]})
    assert not due(GIT, handled, T0 + 1, requests["docs"])  # handled: back to the backoff
    entry = handled.to_status(GIT)
    assert entry["lastHandledSyncRequest"] == requests["docs"]
    assert SourceState.from_status(entry).handled_request == requests["docs"]  # a restart does not sync it again
    assert sync_requests({}, ["docs"]) == {}

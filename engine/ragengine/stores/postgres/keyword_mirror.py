"""Each replica's in-engine keyword index of its PostgreSQL indexes, kept in step with the database.

Why: the SQL keyword leg (``keyword_leg``) reads rows for every query (each scored word's matches, then the
candidates' ``tsvector``s): 88 / 233 ms p50 / p99 at a million chunks (bench/bench_stores.py). The BM25
index the embedded store uses (``retrieval.bm25``) answers from memory (10 / 15 ms), and fused with the
dense list it ranks at least as well on the three evaluation sets (bench/eval/pg_hybrid.py). So a replica
keeps one ``BM25Index`` per index it has searched; the SQL leg stays for filtered queries and for an index
whose mirror is still loading.

Staying in step, through the schema's change log (``schema``):

- each write raises its index's ``change_seq`` under the index row's lock, so one index's writes commit in
  that order; it stamps the chunks it adds with that number (``added_in``) and logs the chunks it removes
  (``chunk_removals``: ids and keyword text, which BM25's document frequencies need);
- a follower thread per replica reads each mirrored index's ``change_seq`` every ``FOLLOW_S`` and applies what
  the writes since then added and removed (one repeatable-read snapshot), so under a steady writer the
  mirrors are at most a fraction of a second behind without any search doing that work (issue 45: with the
  catch-up on the query path, a search that found another search catching up answered from SQL, 88 / 233 ms
  p50 / p99 at a million chunks);
- ``search`` first reads ``change_seq`` (a primary-key lookup). A mirror behind it catches up before it
  searches, so a write acknowledged by any replica is in the next search on every replica: it waits up to
  ``WAIT_S`` for a catch-up already running (the follower's, another search's), then applies what is still
  missing itself, at most ``catch_up`` chunks (the bound on a search's own work);
- otherwise (not loaded yet, further behind, its removals pruned from the log, more dead slots than live,
  or the index dropped and made again) the index is loaded again in full: at once if it holds at most
  ``catch_up`` chunks, else by a background thread, which swaps it in when done, while ``search`` answers
  None and the caller uses the SQL leg;
- ``prune`` deletes removals logged over ``REMOVALS_KEEP_S`` ago and raises the index's ``pruned_through``.

An index's writes draw chunk ids from its table's sequence while they hold the index row's lock, so ids
arrive in increasing order and a sorted array maps them to BM25 slots. Not thread-safe across processes by
design: each replica has its own mirrors, and the database is the only shared state.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from array import array
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Table, func, select, update
from sqlalchemy.engine import Engine

from ragengine.index.state import RWLock
from ragengine.retrieval.bm25 import BM25Index
from ragengine.stores.postgres.schema import Tables

log = logging.getLogger(__name__)
CATCH_UP = 5_000  # chunks a search applies itself before it searches; more is the loader's work
FOLLOW_S = 0.2  # how often the follower brings every mirror up to date (0: no follower)
WAIT_S = 0.25  # how long a search waits for a catch-up already running before it does its own (or uses SQL)
# Query terms scored at most, and their postings in all, the rarest first: a pasted book costs what a
# question does. 256 terms kept the long banking-knowledge questions' MRR (64 cost 0.1, bench/eval/pg_hybrid.py);
# a million postings is one word in every chunk of a million-chunk index (words that common weigh little).
MAX_TERMS = 256
MAX_POSTINGS = 1_000_000
REMOVALS_KEEP_S = 3600  # a replica away longer than this loads its mirrors again in full
LOAD_BATCH = 5_000


@dataclass
class Mirror:
    """One index's BM25 index as of its write ``seq`` (the index row made at ``created``)."""

    created: datetime
    chunks: Table | None = None  # the index's chunk table, for the follower
    seq: int = 0
    bm25: BM25Index = field(default_factory=BM25Index)
    ids: array = field(default_factory=lambda: array("q"))  # slot -> chunk id, increasing
    gone: bytearray = field(default_factory=bytearray)  # slot -> 1 once removed
    dead: int = 0
    lock: RWLock = field(default_factory=RWLock)  # searches share it; applying a change is alone
    syncing: threading.Lock = field(default_factory=threading.Lock)  # one catch-up at a time

    def add(self, rows: Iterable[tuple[int, str]]) -> bool:
        """Append chunks (id, keyword text) in id order; False if an id is not past the last one."""
        for chunk_id, text in rows:
            if self.ids and chunk_id <= self.ids[-1]:
                return False
            self.bm25.add(len(self.ids), text)
            self.ids.append(chunk_id)
            self.gone.append(0)
        return True

    def remove(self, ids: list[int], texts: list[str]) -> None:
        """Take removed chunks out; ids this mirror never held (added and removed between two catch-ups) are
        skipped."""
        if not self.ids:
            return
        held = np.frombuffer(self.ids, dtype=np.int64)
        slots = np.searchsorted(held, np.asarray(ids, dtype=np.int64))
        for slot, chunk_id, text in zip(slots.tolist(), ids, texts, strict=True):
            if slot < len(held) and held[slot] == chunk_id and not self.gone[slot]:
                self.bm25.remove(slot, text)
                self.gone[slot] = 1
                self.dead += 1
        del held

    @property
    def crowded(self) -> bool:
        """More removed slots than live ones: time to load it again (compaction)."""
        return self.dead > 10_000 and self.dead > len(self.ids) - self.dead

    def search(self, query: str, k: int) -> tuple[list[int], list[float]]:
        with self.lock.read():
            slots, scores = self.bm25.search(query, k, None, max_terms=MAX_TERMS, max_postings=MAX_POSTINGS)
            held = np.frombuffer(self.ids, dtype=np.int64)
            ids = held[slots].tolist()
            del held
        return ids, scores.tolist()


class KeywordMirrors:
    def __init__(self, engine: Callable[[], Engine], tables: Callable[[], Tables], *, catch_up: int = CATCH_UP,
                 follow_s: float = FOLLOW_S) -> None:
        self.engine, self.tables = engine, tables
        self.catch_up = catch_up
        self.follow_s = follow_s
        self.wait_s = WAIT_S
        self._mirrors: dict[str, Mirror] = {}
        self._loading: set[str] = set()
        self._guard = threading.Lock()
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="keyword-mirror")
        self._stop = threading.Event()
        self._follower: threading.Thread | None = None
        # Chunks applied by each path, and the most one search applied itself (its bound: catch_up).
        self.applied = {"search": 0, "follower": 0, "loader": 0}
        self.largest_search_catch_up = 0

    def search(self, name: str, row: Any, chunks: Table, query: str, k: int) -> tuple[list[int], list[float]] | None:
        """(chunk ids, BM25 scores) of the ``k`` best chunks of index ``name``, or None when this replica's
        mirror cannot answer yet (the caller uses the SQL leg; the loader is asked to load it). ``row``: the
        index's row as read just now (``change_seq``, ``pruned_through``, ``created_at``, ``chunk_count``)."""
        mirror = self._mirrors.get(name)
        if mirror is None or mirror.created != row.created_at or mirror.seq < row.pruned_through or mirror.seq > row.change_seq:
            if row.chunk_count > self.catch_up:
                self.want(name, chunks)
                return None
            self.load(name, chunks)  # small: loaded here, as fast as a catch-up
            mirror = self._mirrors.get(name)
            if mirror is None:
                return None
        if mirror.seq < row.change_seq and not self._catch_up(mirror, name, chunks, limit=self.catch_up, wait_s=self.wait_s,
                                                               until=row.change_seq, path="search"):
            self.want(name, chunks)
            return None
        return mirror.search(query, k)

    def _catch_up(self, mirror: Mirror, name: str, chunks: Table, *, limit: int | None, wait_s: float = -1,
                  until: int | None = None, path: str = "loader") -> bool:
        """Apply the writes since ``mirror.seq`` (at most ``limit`` added chunks); False when it could not.
        ``wait_s``: how long to wait for a catch-up already running (-1: as long as it takes; 0: not at all);
        ``until``: the write the caller needs, which that catch-up may have applied already."""
        acquired = mirror.syncing.acquire(timeout=wait_s) if wait_s > 0 else mirror.syncing.acquire(blocking=wait_s < 0)
        if not acquired:
            return False  # another catch-up holds it for longer: a search uses the SQL leg
        try:
            if until is not None and mirror.seq >= until:
                return True
            t = self.tables()
            with self.engine().connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
                row = conn.execute(select(t.indexes.c.change_seq, t.indexes.c.pruned_through, t.indexes.c.created_at)
                                   .where(t.indexes.c.name == name)).first()
                if row is None or row.created_at != mirror.created or mirror.seq < row.pruned_through:
                    return False
                if row.change_seq == mirror.seq:
                    return True
                added = select(chunks.c.id, chunks.c.search_text).where(
                    chunks.c.index_name == name, chunks.c.added_in > mirror.seq).order_by(chunks.c.id)
                rows = conn.execute(added if limit is None else added.limit(limit + 1)).all()
                if limit is not None and len(rows) > limit:
                    return False
                removed = conn.execute(select(t.removals.c.ids, t.removals.c.search_texts).where(
                    t.removals.c.index_name == name, t.removals.c.change_seq > mirror.seq)
                    .order_by(t.removals.c.change_seq)).all()
            with mirror.lock.write():
                if not mirror.add((r.id, r.search_text) for r in rows):
                    mirror.seq = -1  # ids out of order: never expected, so load again from scratch
                    return False
                for r in removed:
                    mirror.remove(list(r.ids), list(r.search_texts))
                mirror.seq = row.change_seq
            self.applied[path] += len(rows)
            if path == "search":
                self.largest_search_catch_up = max(self.largest_search_catch_up, len(rows))
            return not mirror.crowded
        finally:
            mirror.syncing.release()

    def want(self, name: str, chunks: Table) -> None:
        """Ask the loader to bring index ``name``'s mirror up to date (once: a pending request is enough)."""
        with self._guard:
            if name in self._loading:
                return
            self._loading.add(name)
        self._loader.submit(self._load_logged, name, chunks)

    def _load_logged(self, name: str, chunks: Table) -> None:
        try:
            self.load(name, chunks)
        except Exception:
            log.exception("loading the keyword index of %r failed; its searches use SQL meanwhile", name)
        finally:
            with self._guard:
                self._loading.discard(name)

    def load(self, name: str, chunks: Table) -> bool:
        """Bring index ``name``'s mirror up to date now: a catch-up where one can, else a full load, built aside
        and swapped in (searches go on meanwhile). False when the index does not exist."""
        mirror = self._mirrors.get(name)
        if mirror is not None and mirror.seq >= 0 and self._catch_up(mirror, name, chunks, limit=None):
            return True
        t = self.tables()
        with self.engine().connect().execution_options(isolation_level="REPEATABLE READ", yield_per=LOAD_BATCH) as conn, \
                conn.begin():
            row = conn.execute(select(t.indexes.c.change_seq, t.indexes.c.created_at)
                               .where(t.indexes.c.name == name)).first()
            if row is None:
                self._mirrors.pop(name, None)
                return False
            fresh = Mirror(created=row.created_at, chunks=chunks, seq=row.change_seq)
            result = conn.execute(select(chunks.c.id, chunks.c.search_text)
                                  .where(chunks.c.index_name == name).order_by(chunks.c.id))
            for batch in result.partitions():
                fresh.add((r.id, r.search_text) for r in batch)
        self._mirrors[name] = fresh
        log.info("keyword index of %r loaded: %d chunks as of write %d", name, len(fresh.ids), fresh.seq)
        self._start_follower()
        return True

    def _start_follower(self) -> None:
        with self._guard:
            if self._follower is None and self.follow_s > 0 and not self._stop.is_set():
                self._follower = threading.Thread(target=self._follow, name="keyword-follower", daemon=True)
                self._follower.start()

    def _follow(self) -> None:
        """Every ``follow_s``: each mirror caught up with its index's writes (a mirror a search or the loader is
        catching up now is left to them; one too far behind goes to the loader)."""
        while not self._stop.wait(self.follow_s):
            for name, mirror in list(self._mirrors.items()):
                if mirror.chunks is None or mirror.seq < 0 or self._stop.is_set():
                    continue
                try:
                    if not self._catch_up(mirror, name, mirror.chunks, limit=LOAD_BATCH, wait_s=0, path="follower") \
                            and not mirror.syncing.locked():
                        self.want(name, mirror.chunks)
                except Exception:  # the database away for a moment: the next round (or a search) tries again
                    log.debug("keyword follower: catching up %r failed", name, exc_info=True)

    def prune(self, keep_s: float = REMOVALS_KEEP_S) -> int:
        """Delete the removals logged over ``keep_s`` ago; returns how many log rows went."""
        t = self.tables()
        r = t.removals
        with self.engine().begin() as conn:
            old = conn.execute(r.delete().where(r.c.removed_at < func.now() - func.make_interval(0, 0, 0, 0, 0, 0, keep_s))
                               .returning(r.c.index_name, r.c.change_seq)).all()
            through: dict[str, int] = {}
            for index_name, seq in old:
                through[index_name] = max(through.get(index_name, 0), int(seq))
            for index_name, seq in through.items():
                conn.execute(update(t.indexes).where(t.indexes.c.name == index_name)
                             .values(pruned_through=func.greatest(t.indexes.c.pruned_through, seq)))
        return len(old)

    def forget(self, name: str) -> None:
        self._mirrors.pop(name, None)

    def keep_only(self, names: set[str]) -> None:
        """Forget the mirrors of indexes that no longer exist (dropped, or a version retired after a re-index)."""
        for name in set(self._mirrors) - names:
            self._mirrors.pop(name, None)

    def held(self) -> dict[str, int]:
        """Chunks held per mirrored index (live ones)."""
        return {n: len(m.ids) - m.dead for n, m in list(self._mirrors.items())}

    def close(self) -> None:
        self._stop.set()
        if self._follower is not None:
            self._follower.join(timeout=5)
        with contextlib.suppress(Exception):
            self._loader.shutdown(wait=False, cancel_futures=True)

"""Helpers for the index-version tests and benchmarks: wait for a job, a query loop that records every answer."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx


def wait_job(base: str, index: str, timeout_s: float = 300.0, headers: dict | None = None, *,
             started: bool = False) -> dict:
    """GET /indexes/{index}/reindex until no job runs; the last answer (deadline: an AssertionError).
    ``started``: wait for a job to exist first (a re-index the engine starts itself, on a change of the
    embedding target, begins on its background loop's next turn, not when /health names the target)."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = httpx.get(f"{base}/indexes/{index}/reindex", headers=headers, timeout=30)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        if body["job"] is None and not started:
            return body
        if body["job"] is not None and body["job"]["state"] != "running":
            return body
        assert time.monotonic() < deadline, f"job still running after {timeout_s} s: {body['job']}"
        time.sleep(0.1)


@dataclass
class Answer:
    at: float  # when the request was sent (epoch seconds)
    ms: float  # how long it took
    status: int
    version: int | None
    model: str | None
    ranking: tuple
    error: str = ""


@dataclass
class QueryLoop:
    """A client that sends the same /retrieve without pause until stopped, recording every answer."""

    base: str
    body: dict
    headers: dict | None = None
    answers: list[Answer] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> QueryLoop:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        with httpx.Client(timeout=60, headers=self.headers) as client:
            while not self._stop.is_set():
                at, start = time.time(), time.perf_counter()
                try:
                    resp = client.post(f"{self.base}/retrieve", json=self.body)
                except httpx.HTTPError as exc:
                    self.answers.append(Answer(at, (time.perf_counter() - start) * 1000, 0, None, None, (), repr(exc)))
                    continue
                ms = (time.perf_counter() - start) * 1000
                ranking: tuple = ()
                if resp.status_code == 200:
                    ranking = tuple((r["doc_id"], round(r["score"], 6)) for r in resp.json()["results"])
                version = resp.headers.get("x-index-version")
                self.answers.append(Answer(at, ms, resp.status_code, int(version) if version else None,
                                           resp.headers.get("x-embedding-model"), ranking,
                                           "" if resp.status_code == 200 else resp.text[:300]))

    def wait_for(self, condition, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(condition(a) for a in list(self.answers)):
            assert time.monotonic() < deadline, "no answer met the condition in time"
            time.sleep(0.05)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

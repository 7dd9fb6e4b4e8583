"""An index's version book and every decision taken on it. Pure: values in, values out, the clock passed in.

Contract:

- An index (the name clients use) has one book: its versions, which one is ``live``, and at most one job.
  The book is the index's existence: an index without one does not exist (an import in progress, a
  version left by a crash, are hidden and cleaned up).
- A version is one index of the store (``physical``): the index's own name for version 1, so indexes made
  before versions existed are version 1 exactly as they are, and ``<name>/v<n>`` after (no client name
  holds a '/'). It is bound to the embedding model that embedded it (``model``, a ``ModelRef`` key, and
  ``dim``) and to its chunking: its queries are always embedded with that model. ``model`` None: an
  index made before versions with a model of another dimension than the engine's (it cannot be queried
  until a re-index, which reads only the stored text, replaces it).
- Version states: ``live`` (exactly one), ``building`` (the target of a running re-index), ``retired``
  (an earlier live version, kept for rollback), ``rejected`` (built, but the job's gate failed: it never
  went live; kept, with its scores, so an admin may still activate it), ``failed`` (a build that failed;
  dropped at once).
- Writes go to every version in ``write_targets``: the live one and, while a job runs, its target, so a
  version being built misses nothing (the build itself copies what was there before, and a final
  comparison catches a write a crash cut in half).
- A re-index may carry a ``gate`` (docs/evaluation.md): before the swap the new version is scored on a golden
  set, and ``reject`` ends the job instead of ``swap`` when it fails.
- A job (``reindex`` builds a new version; ``activate`` brings a retired one up to date) holds a lease
  (``owner``, ``lease_until``): one replica runs it, another takes it over when the lease runs out.
- ``swap``: the job's target becomes live in one step (one book write), the old live version is retired,
  and retired versions beyond ``keep`` (the newest kept) are dropped: the caller deletes their physical
  indexes after the swap is written.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ragengine.errors import BadRequest, Conflict, NotFound

SEP = "/"
LIVE, BUILDING, RETIRED, FAILED, REJECTED = "live", "building", "retired", "failed", "rejected"
RUNNING, SUCCEEDED, JOB_FAILED, JOB_REJECTED = "running", "succeeded", "failed", "rejected"
REINDEX, ACTIVATE = "reindex", "activate"
REPLICAS = "/replicas"  # the heartbeats' entry in the books' table (no index name holds a '/')


def physical_name(name: str, version: int) -> str:
    return name if version == 1 else f"{name}{SEP}v{version}"


def logical_name(physical: str) -> str:
    return physical.split(SEP, 1)[0]


def is_internal(physical: str) -> bool:
    return SEP in physical


@dataclass(frozen=True)
class Version:
    version: int
    physical: str
    model: str | None
    dim: int
    chunking: dict
    state: str
    created_at: float
    activated_at: float | None = None
    evaluation: dict | None = None  # a gated build: the gate's verdict (metric, both scores, thresholds, runs)

    def summary(self) -> dict[str, Any]:
        return {"version": self.version, "state": self.state, "embedding_model": self.model, "dim": self.dim,
                "chunking": self.chunking, "created_at": self.created_at, "activated_at": self.activated_at,
                "evaluation": self.evaluation}


@dataclass(frozen=True)
class Job:
    id: str
    kind: str
    version: int
    state: str
    started_at: float
    finished_at: float | None = None
    done: int = 0
    total: int = 0
    message: str = ""
    owner: str | None = None
    lease_until: float = 0.0
    gate: dict | None = None  # {"metric", "minimum", "max_regression", "evaluation_id" | "configured"}

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    def summary(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "version": self.version, "state": self.state,
                "documents_done": self.done, "documents_total": self.total, "message": self.message,
                "started_at": self.started_at, "finished_at": self.finished_at, "gate": self.gate}


@dataclass(frozen=True)
class Book:
    name: str
    live: int
    versions: tuple[Version, ...]
    job: Job | None = None
    extra: dict = field(default_factory=dict)

    # -- reading -----------------------------------------------------------------------------------
    def version(self, number: int) -> Version:
        for v in self.versions:
            if v.version == number:
                return v
        raise NotFound(f"Index '{self.name}' has no version {number}.")

    @property
    def live_version(self) -> Version:
        return self.version(self.live)

    @property
    def running_job(self) -> Job | None:
        return self.job if self.job is not None and self.job.running else None

    def write_targets(self) -> list[Version]:
        """The versions every write must reach: the live one, and a running job's target."""
        out = [self.live_version]
        job = self.running_job
        if job is not None and job.version != self.live:
            out.append(self.version(job.version))
        return out

    def physicals(self) -> set[str]:
        return {v.physical for v in self.versions}

    def models(self) -> set[str]:
        """The models this index's queries and builds may need (live, and a running job's target)."""
        return {v.model for v in self.write_targets() if v.model is not None}

    # -- serialisation -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "live": self.live, "versions": [asdict(v) for v in self.versions],
                "job": asdict(self.job) if self.job else None, **({"extra": self.extra} if self.extra else {})}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Book:
        return cls(data["name"], int(data["live"]),
                   tuple(Version(**{**v, "chunking": dict(v.get("chunking") or {})}) for v in data["versions"]),
                   Job(**data["job"]) if data.get("job") else None, dict(data.get("extra") or {}))


def new_book(name: str, model: str | None, dim: int, chunking: dict, now: float) -> Book:
    return Book(name, 1, (Version(1, physical_name(name, 1), model, dim, chunking, LIVE, now, now),))


def _with_version(book: Book, version: Version) -> tuple[Version, ...]:
    return tuple(version if v.version == version.version else v for v in book.versions)


def start_reindex(book: Book, model: str, dim: int, chunking: dict, job_id: str, now: float,
                  gate: dict | None = None) -> Book:
    """A new version (the next number) for ``model`` and ``chunking``, and the job that builds it (and, with
    a ``gate``, scores it before the swap)."""
    running = book.running_job
    if running is not None:
        raise Conflict(f"Index '{book.name}' already has a {running.kind} of version {running.version} running "
                       f"({running.done} of {running.total} documents): wait for it, or cancel it.")
    number = max(v.version for v in book.versions) + 1
    version = Version(number, physical_name(book.name, number), model, dim, chunking, BUILDING, now)
    job = Job(job_id, REINDEX, number, RUNNING, now, gate=gate)
    return replace(book, versions=(*book.versions, version), job=job)


def start_activate(book: Book, number: int, job_id: str, now: float) -> Book:
    """Make retired version ``number`` live again (rollback, or forward to a newer one): the job first
    brings it up to date with what the live version got since it retired, then swaps."""
    target = book.version(number)
    if number == book.live:
        raise BadRequest(f"Version {number} of index '{book.name}' is already live.")
    if target.state not in (RETIRED, REJECTED):
        raise Conflict(f"Version {number} of index '{book.name}' is {target.state}: only a retired or rejected "
                       "version can be activated.")
    if target.model is None:
        raise Conflict(f"Version {number} of index '{book.name}' was made with an unknown model: it cannot serve.")
    running = book.running_job
    if running is not None:
        raise Conflict(f"Index '{book.name}' already has a {running.kind} of version {running.version} running.")
    return replace(book, job=Job(job_id, ACTIVATE, number, RUNNING, now))


def cancel(book: Book, message: str, now: float) -> tuple[Book, list[Version]]:
    """End a running job as failed (superseded, or the caller gives up): a version it was building is
    dropped (returned for the caller to delete), a version it was activating stays retired."""
    job = book.running_job
    if job is None:
        return book, []
    failed = replace(job, state=JOB_FAILED, finished_at=now, message=message, owner=None, lease_until=0.0)
    target = book.version(job.version)
    if job.kind == REINDEX and target.state == BUILDING:
        return replace(book, versions=tuple(v for v in book.versions if v.version != job.version), job=failed), [target]
    return replace(book, job=failed), []


def claim(book: Book, job_id: str, owner: str, now: float, lease_s: float) -> Book | None:
    """The book with ``owner`` holding the job's lease until ``now + lease_s``; None when the job is not
    running any more, or another owner's lease has not run out."""
    job = book.running_job
    if job is None or job.id != job_id:
        return None
    if job.owner not in (None, owner) and job.lease_until > now:
        return None
    return replace(book, job=replace(job, owner=owner, lease_until=now + lease_s))


def progress(book: Book, job_id: str, owner: str, done: int, total: int, message: str, now: float,
             lease_s: float) -> Book | None:
    """Record progress (and renew the lease); None when ``owner`` no longer holds the job."""
    job = book.running_job
    if job is None or job.id != job_id or job.owner != owner:
        return None
    return replace(book, job=replace(job, done=done, total=total, message=message, lease_until=now + lease_s))


def _kept(versions: tuple[Version, ...], keep: int, keep_rejected: int) -> tuple[tuple[Version, ...], list[Version]]:
    """Retired versions beyond the newest ``keep`` (the rollback targets, the most recently live first) and
    rejected ones beyond the newest ``keep_rejected`` go (returned for the caller to delete)."""
    def newest(state: str) -> list[Version]:
        return sorted((v for v in versions if v.state == state), key=lambda v: -(v.activated_at or v.created_at))

    dropped = newest(RETIRED)[max(0, keep):] + newest(REJECTED)[max(0, keep_rejected):]
    gone = {v.version for v in dropped}
    return tuple(v for v in versions if v.version not in gone), dropped


def swap(book: Book, job_id: str, owner: str, now: float, keep: int,
         evaluation: dict | None = None) -> tuple[Book, list[Version]] | None:
    """The job's target becomes live in one step; the old live version is retired; retired versions beyond
    the newest ``keep`` go (returned for the caller to delete). None: the job is not this owner's any more.
    ``evaluation``: the gate's verdict, kept with the version."""
    job = book.running_job
    if job is None or job.id != job_id or job.owner != owner:
        return None
    old = book.live_version
    target = book.version(job.version)
    versions = _with_version(book, replace(old, state=RETIRED))
    book = replace(book, live=target.version, versions=versions)
    # a rejected version is kept until the next re-index ends (an admin may activate it meanwhile)
    versions, dropped = _kept(_with_version(book, replace(target, state=LIVE, activated_at=now,
                                                          evaluation=evaluation or target.evaluation)), keep, 0)
    message = f"version {target.version} is live" + (f"; {evaluation['message']}" if evaluation else "")
    done = replace(job, state=SUCCEEDED, finished_at=now, done=job.total, owner=None, lease_until=0.0,
                   message=message)
    return replace(book, versions=versions, job=done), dropped


def reject(book: Book, job_id: str, owner: str, now: float, keep: int,
           evaluation: dict) -> tuple[Book, list[Version]] | None:
    """The gate failed: the job's target stays, ``rejected``, with the verdict (an earlier rejected version goes);
    the live version keeps serving. None: the job is not this owner's any more."""
    job = book.running_job
    if job is None or job.id != job_id or job.owner != owner:
        return None
    target = book.version(job.version)
    versions, dropped = _kept(_with_version(book, replace(target, state=REJECTED, evaluation=evaluation)), keep, 1)
    done = replace(job, state=JOB_REJECTED, finished_at=now, done=job.total, owner=None, lease_until=0.0,
                   message=evaluation["message"])
    return replace(book, versions=versions, job=done), dropped


def fail(book: Book, job_id: str, message: str, now: float) -> tuple[Book, list[Version]]:
    job = book.running_job
    if job is None or job.id != job_id:
        return book, []
    return cancel(book, message, now)


def drop_version(book: Book, number: int) -> tuple[Book, Version]:
    """Delete a retired version (its physical index goes with it); never the live one nor a job's target."""
    target = book.version(number)
    if number == book.live:
        raise Conflict(f"Version {number} of index '{book.name}' is live: activate another version first.")
    job = book.running_job
    if job is not None and job.version == number:
        raise Conflict(f"Version {number} of index '{book.name}' is the target of a running {job.kind}.")
    return replace(book, versions=tuple(v for v in book.versions if v.version != number)), target


def follows_target(book: Book, key: str, generation: int | None) -> bool:
    """Whether the engine's target model (``key``, with the embedding file's ``generation``) is news to this
    index: a newer generation than the one it last followed, or, without generations (the model set by
    environment), another model than the one it last followed. A target already followed is not followed
    again (a re-index to it that failed is not retried in a loop; a client may start one), and a replica
    that still has an older target (a ConfigMap not yet updated on its node) never undoes a newer one."""
    last = book.extra.get("target")
    if last is None:
        return True
    if generation is not None and last.get("generation") is not None:
        return generation > last["generation"]
    if generation is not None:
        return True
    return last.get("key") != key


def follow_target(book: Book, key: str, generation: int | None) -> Book:
    return replace(book, extra={**book.extra, "target": {"key": key, "generation": generation}})


def summary(book: Book, *, target_model: str | None = None) -> dict[str, Any]:
    """What the API and /health show of an index's versions."""
    job = book.job
    live = book.live_version
    out: dict[str, Any] = {"index": book.name, "live_version": book.live, "embedding_model": live.model,
                           "versions": [v.summary() for v in sorted(book.versions, key=lambda v: v.version)],
                           "job": job.summary() if job else None}
    if target_model is not None:
        out["current"] = live.model == target_model
    return out

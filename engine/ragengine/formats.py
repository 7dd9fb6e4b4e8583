"""The version of every format the engine persists, and the one way a version found on disk is judged.

Each persistent format carries its version (docs/formats.md lists every file, its marker and who upgrades it):

- the data folder: ``<data_dir>/ragengine-format.json`` (``DATA``). Its version covers the folder's layout and every
  file in it that has no version of its own: ``indexes/<name>/index.json``, ``versions/<name>.json``, ``uploads/``;
- an index snapshot's ``manifest.json`` (``SNAPSHOT``), each journal record's magic ``RGJ<n>`` (``JOURNAL``), an
  export file's header (``EXPORT``), a queued upload's parse result ``ragengine-parsed/<n>`` (``PARSED``);
- the session store's and the PostgreSQL store's schemas: their alembic revision (``check_revision``).

A version above the newest this engine reads is refused with ``NewerFormat``, naming the file and both versions: a
newer engine wrote it, and this one must neither read it (a guess) nor write into it. A marker that cannot be read
(not JSON, cut short, another shape, not a number) is refused with ``DamagedMarker``, never taken for a version.

**Format 0: unmarked.** Releases up to 26df61e (the release before markers) wrote no data folder marker: a folder
without one is format 0, and so is an empty folder. Format 1 adds the marker and changes no file, so those releases
still read a format-1 folder (a rollback to them serves). ``upgrade_data_dir`` brings a folder to ``DATA.current``
in place, one step at a time, each step's files first and its marker last (written aside, fsynced, renamed): a crash
at any point leaves a folder that the next start upgrades again from where the marker says.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragengine import __version__

ROLLBACK = "upgrade the engine, or restore a backup made before the upgrade (docs/formats.md)"
NEWER_FILE = "import it into an engine at least as new as the one that made it (docs/formats.md)"


class FormatRefused(Exception):
    """Data this engine must not read or write into. At start-up the engine stops before it writes anything."""


class NewerFormat(FormatRefused):
    """Written by a newer engine: a version above the newest this engine reads."""


class DamagedMarker(FormatRefused):
    """A version marker that cannot be read: this engine does not guess which format the data is in."""


@dataclass(frozen=True)
class Format:
    name: str  # what the marker or header calls it ("format")
    label: str  # what messages call it
    current: int  # the version this engine writes, and the newest it reads
    oldest: int = 1  # the first version there was: every version from it to ``current`` is read

    def check(self, found: object, where: str, *, writer: object = None, advice: str = ROLLBACK) -> int:
        """``found`` as a version this engine reads (``oldest`` to ``current``), or why not (``advice``: what to do
        about a newer one)."""
        if type(found) is not int or found < self.oldest:  # bool is an int subclass: excluded
            raise DamagedMarker(f"{where}: the {self.label} version {found!r} is not a version number (the marker is "
                                "damaged); this engine will not guess which format it holds: restore it from a backup")
        if found > self.current:
            by = f" (written by ragengine {writer})" if isinstance(writer, str) and writer else ""
            raise NewerFormat(f"{where} holds {self.label} format version {found}{by}; this engine (ragengine "
                              f"{__version__}) reads {self.label} formats up to version {self.current}: {advice}")
        return found


UNMARKED = 0  # a data folder without a marker: releases before format 1 wrote none
DATA = Format("ragengine-data", "data folder", 1, oldest=UNMARKED)
SNAPSHOT = Format("ragengine-index-snapshot", "index snapshot", 1)
JOURNAL = Format("ragengine-journal", "index journal", 1)
EXPORT = Format("ragengine-index-export", "index export", 1)
PARSED = Format("ragengine-parsed", "queued upload", 1)
MARKER = "ragengine-format.json"


def marker_path(data_dir: Path) -> Path:
    return Path(data_dir) / MARKER


def read_data_version(data_dir: Path) -> int:
    """The data folder's format version (``UNMARKED`` without a marker); raises ``FormatRefused``. Reads only."""
    path = marker_path(data_dir)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return UNMARKED
    except OSError as exc:  # a folder where the file should be, permissions
        raise DamagedMarker(f"{path}: unreadable ({exc.strerror or exc}); this engine will not guess which format the "
                            "data folder holds") from exc
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise DamagedMarker(f"{path} is damaged or cut short ({len(raw)} bytes that are not JSON); this engine will not "
                            "guess which format the data folder holds: restore the file from a backup") from exc
    if not isinstance(data, dict) or data.get("format") != DATA.name:
        raise DamagedMarker(f"{path} is not a ragengine data folder marker (expected {{\"format\": {DATA.name!r}, "
                            "\"version\": N}); this engine will not guess which format the data folder holds")
    return DATA.check(data.get("version"), str(path), writer=data.get("engine"))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_marker(data_dir: Path, version: int) -> None:
    """The data folder's marker, atomically: written aside (a name of this process's own), fsynced, renamed."""
    path = marker_path(data_dir)
    body = {"format": DATA.name, "version": version, "engine": __version__}
    tmp = path.with_name(f".{MARKER}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(body, fh)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _from_unmarked(data_dir: Path) -> None:
    """0 → 1: no file changes. Format 1 only adds the markers, so a release before it reads a format-1 folder."""


# The in-place upgrades, by the version each starts from. Each brings every file of the folder to the next version,
# crash-safely (new files aside, fsynced, renamed) and idempotently: a crash mid-step runs the step again.
UPGRADES: dict[int, Callable[[Path], None]] = {0: _from_unmarked}


def upgrade_data_dir(data_dir: Path) -> int:
    """Bring the data folder to ``DATA.current`` in place; returns the version it had. Writes nothing when it is
    current; refuses (``FormatRefused``) a newer or damaged marker, having written nothing. Callers hold the folder:
    the FAISS store under its writer lock (index/durability.py)."""
    found = read_data_version(data_dir)
    for version in range(found, DATA.current):
        UPGRADES[version](Path(data_dir))
        write_marker(data_dir, version + 1)  # the step's files first, its marker last
    return found


def check_revision(where: str, stored: Sequence[str], known: Sequence[str]) -> str:
    """An alembic-managed schema's revision (``stored``: the rows of its ``alembic_version``) against the revisions
    this engine's migrations know (``known``, oldest first): the revision, or ``FormatRefused``."""
    newest = known[-1]
    if len(stored) != 1:
        raise DamagedMarker(f"{where}: its alembic_version table holds {len(stored)} revisions ({', '.join(stored) or 'none'}), "
                            "not one; this engine will not guess the schema's version: restore the database from a backup")
    revision = stored[0]
    if revision not in known:
        raise NewerFormat(f"{where} is at schema revision {revision!r}, which this engine (ragengine {__version__}) does not "
                          f"know: it migrates up to revision {newest!r}, so a newer engine migrated it: {ROLLBACK}")
    return revision


_REVISION = re.compile(r"^(down_revision|revision)\s*(?::[^=]*)?=\s*(?:None|[\"']([^\"']+)[\"'])\s*$", re.MULTILINE)


def known_revisions(script_location: Path) -> list[str]:
    """The revisions of an alembic migrations folder, oldest first: each script's ``revision`` and ``down_revision``
    as written, followed from the root. Read as text, not through alembic's ScriptDirectory, which imports alembic
    (and Mako) and every migration script: a start-up that has nothing to migrate does neither (docs/performance.md;
    tests/conversations/test_migrations.py checks both give the same list)."""
    parent: dict[str | None, str] = {}
    for script in sorted((script_location / "versions").glob("*.py")):
        found = {key: value or None for key, value in _REVISION.findall(script.read_text(encoding="utf-8"))}
        if "revision" in found and found["revision"] is not None:
            parent[found.get("down_revision")] = found["revision"]
    chain: list[str] = []
    revision = parent.get(None)
    while revision is not None and len(chain) < len(parent):  # bounded: a cycle cannot loop
        chain.append(revision)
        revision = parent.get(revision)
    return chain


def check_schema(conn: Any, where: str, script_location: Path, schema: str | None = None) -> str | None:
    """The revision of the alembic-managed schema ``conn`` reaches (``schema``: where its ``alembic_version`` is),
    checked against ``script_location``'s migrations; None when it has no ``alembic_version`` (not migrated yet).
    Reads only."""
    from sqlalchemy import Column, MetaData, String, Table, inspect, select

    if not inspect(conn).has_table("alembic_version", schema=schema):
        return None
    table = Table("alembic_version", MetaData(), Column("version_num", String), schema=schema)
    stored = [str(row[0]) for row in conn.execute(select(table.c.version_num))]
    return check_revision(where, stored, known_revisions(script_location))

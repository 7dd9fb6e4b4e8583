"""``ragengine export`` and ``ragengine import``: indexes as portable files through a running engine's API (the
backup CronJob runs ``ragengine export --all --dir``; docs/versions.md). An export is checked as it arrives, with
the reader the engine's import uses, and kept only once complete."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ragengine.cli.http import api_key_from, engine_client, refusal


def _download(client, index: str, target: Path) -> tuple[int, int]:
    """Stream index ``index``'s export into ``target``: checked as it arrives (the same reader the engine's
    import uses), written to a temporary file and renamed only once complete. -> (documents, bytes)."""
    from urllib.parse import quote

    import httpx

    from ragengine.errors import EngineError
    from ragengine.versions.archive import ArchiveReader

    tmp = target.with_name(target.name + ".part")
    reader = ArchiveReader()
    size = 0
    try:
        with client.stream("GET", f"/indexes/{quote(index, safe='')}/export") as resp:
            if resp.status_code != 200:
                resp.read()
                raise refusal(resp, f"GET /indexes/{index}/export")
            with open(tmp, "wb") as out:
                for block in resp.iter_bytes():
                    reader.feed(block)
                    out.write(block)
                    size += len(block)
        trailer = reader.finish()
    except EngineError as exc:
        tmp.unlink(missing_ok=True)
        raise click.ClickException(f"export of {index!r} is incomplete or damaged: {exc.message}") from exc
    except (httpx.HTTPError, OSError) as exc:
        tmp.unlink(missing_ok=True)
        raise click.ClickException(f"export of {index!r} failed: {exc}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(target)
    return int(trailer["documents"]), size


EXPORT_SUFFIX = ".ragx.gz"


@click.command("export")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The engine's base URL.")
@click.option("--api-key", default=None,
              help="Bearer token (admin role: an export holds every document whatever its ACL); prefer the "
                   "RAGENGINE_API_KEY environment variable (a flag shows in ps).")
@click.option("--index", "indexes", multiple=True, help="Index to export (repeatable).")
@click.option("--all", "every", is_flag=True, help="Every index the key sees (GET /indexes).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File for a single --index (default: <index>.ragx.gz).")
@click.option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write <index>-<UTC time>.ragx.gz files here (backups).")
@click.option("--keep", type=int, default=0, show_default=True,
              help="With --dir: keep only the newest N files of each exported index (0: keep all).")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="Seconds per export.")
def export_command(url: str, api_key: str | None, indexes: tuple[str, ...], every: bool, output: Path | None,
               folder: Path | None, keep: int, timeout: float) -> None:
    """Download indexes as portable export files (streamed, gzip, checksummed; docs/versions.md)."""
    import time
    from urllib.parse import quote

    if bool(indexes) == every:
        raise click.UsageError("name --index (one or more) or --all")
    if output is not None and (folder is not None or every or len(indexes) != 1):
        raise click.UsageError("--output takes exactly one --index (use --dir for several)")
    with engine_client(url, api_key_from(api_key), timeout) as client:
        names = list(indexes)
        if every:
            resp = client.get("/indexes")
            if resp.status_code != 200:
                raise refusal(resp, "GET /indexes")
            names = resp.json()
        now = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        failed = []
        for name in names:
            if folder is not None:
                target = folder / f"{quote(name, safe='')}-{stamp}{EXPORT_SUFFIX}"
            else:
                target = output or Path(f"{quote(name, safe='')}{EXPORT_SUFFIX}")
            try:
                docs, size = _download(client, name, target)
            except click.ClickException as exc:
                failed.append(name)
                click.echo(f"error: {exc.message}", err=True)
                continue
            click.echo(f"{name}: {docs} documents, {size} bytes -> {target}")
            if folder is not None and keep > 0:
                _prune(folder, quote(name, safe=""), keep)
    if failed:
        raise click.ClickException(f"{len(failed)} of {len(names)} exports failed: {', '.join(failed)}")


def _prune(folder: Path, prefix: str, keep: int) -> None:
    """Delete all but the newest ``keep`` export files of one index (their names sort by time)."""
    import re

    pattern = re.compile(re.escape(prefix) + r"-\d{8}T\d{6}\.\d{3}Z" + re.escape(EXPORT_SUFFIX) + "$")
    files = sorted(p for p in folder.iterdir() if pattern.match(p.name))
    for old in files[:-keep]:
        old.unlink()
        click.echo(f"removed {old} (keeping {keep})")


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The engine's base URL.")
@click.option("--api-key", default=None, help="Bearer token (write or admin role); prefer RAGENGINE_API_KEY.")
@click.option("--index", "index_name", default=None, help="Name of the new index (default: the exported index's).")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="Seconds for the import.")
def import_command(file: Path, url: str, api_key: str | None, index_name: str | None, timeout: float) -> None:
    """Create an index from an export file (refused whole if it is truncated or damaged)."""
    import zlib
    from urllib.parse import quote

    import httpx

    if index_name is None:
        with open(file, "rb") as fh:  # the header is the first line of the gzip stream
            head = zlib.decompressobj(31).decompress(fh.read(1 << 20)).split(b"\n", 1)[0]
        try:
            index_name = json.loads(head)["index"]
        except (ValueError, KeyError, TypeError) as exc:
            raise click.ClickException(f"{file} is not a ragengine export: give --index") from exc

    def chunks():
        with open(file, "rb") as fh:
            while block := fh.read(1 << 20):
                yield block

    with engine_client(url, api_key_from(api_key), timeout) as client:
        try:
            resp = client.post(f"/indexes/{quote(str(index_name), safe='')}/import", content=chunks(),
                               headers={"Content-Type": "application/gzip"})
        except httpx.HTTPError as exc:
            raise click.ClickException(f"cannot reach {url}: {exc}") from exc
    if resp.status_code != 201:
        raise refusal(resp, f"POST /indexes/{index_name}/import")
    out = resp.json()
    click.echo(f"{out['index']}: {out['documents']} documents, {out['chunks']} chunks imported (vectors {out['vectors']})")

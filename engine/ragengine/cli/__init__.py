"""The ``ragengine`` command: ``serve`` runs the engine, ``index`` sends a folder of files to one, ``migrate``
moves FAISS indexes into an external store, ``export`` / ``import`` copy indexes as portable files (the
backup CronJob runs ``ragengine export --all --dir``), ``eval`` scores an index on a golden set."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ragengine.cli.http import API_KEY_FLAG_WARNING, API_KEY_HELP, api_key_from, engine_client

__all__ = ["API_KEY_FLAG_WARNING", "main"]


class _LazyGroup(click.Group):
    """Commands from other modules, imported only when named or listed (click's own pattern for lazy
    subcommands). ``ragengine serve`` starts loading the embedding model as soon as its settings are read
    (embedding/early.py); importing ``eval``'s modules first (FastAPI among them) held that start back by
    most of a second."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy  # command name -> "module:attribute"

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.lazy:
            return super().get_command(ctx, name)
        import importlib

        module, attribute = self.lazy[name].split(":")
        return getattr(importlib.import_module(module), attribute)


@click.group(cls=_LazyGroup, lazy={"export": "ragengine.cli.archive:export_command",
                                   "import": "ragengine.cli.archive:import_command",
                                   "eval": "ragengine.evaluation.cli:eval_command"})
@click.version_option(package_name="ragengine")
def main() -> None:
    """ragengine: retrieval-augmented generation as a service."""


def _parse_set(values: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in values:
        if "=" not in item:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint="--set")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def check_data_dir(path: Path) -> None:
    """The data folder exists and this process can write it, or a message that says what to do. A volume that
    the pod's user cannot write (a hostPath-style StorageClass makes root-owned 0750 directories, and fsGroup
    does not apply to it) otherwise fails deep in the start with a bare 'Permission denied'. It writes nothing
    into a folder that exists (a refused start leaves the folder as it was: docs/formats.md)."""
    import os

    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        try:
            st = path.stat()
            owner = f"owned by uid {st.st_uid} gid {st.st_gid}, mode {st.st_mode & 0o7777:04o}"
        except OSError:
            owner = "its owner unknown"
        raise click.ClickException(
            f"the data folder {path} is not writable by this process (uid {os.getuid()}, groups "
            f"{sorted(os.getgroups())}): {exc.strerror or exc}; the folder is {owner}. In Kubernetes the engine's "
            "volume comes from its StorageClass, which must give the pod's fsGroup write access (a hostPath "
            "provisioner does not): set spec.storage.volume.storageClassName to a class that does (on the "
            "project's local cluster: ragengine-local), or fix the volume's ownership.") from exc


@main.command()
@click.option("--host", default=None, help="Bind address [env RAGENGINE_HOST; 127.0.0.1].")
@click.option("--port", type=int, default=None,
              help="Port [env RAGENGINE_PORT; 8000]; 0 = a free port. 'listening on URL' is printed once bound.")
@click.option("--data-dir", type=click.Path(file_okay=False, readable=False, path_type=Path), default=None,
              help="Indexes, journals and sessions [env RAGENGINE_DATA_DIR; ./data].")
@click.option("--embedding-model", default=None, help="package:<module>, a local path or a model name.")
@click.option("--embedding-url", default=None, help="OpenAI-compatible embeddings base URL (…/v1).")
@click.option("--llm-url", default=None, help="OpenAI-compatible LLM base URL (…/v1).")
@click.option("--rerank-model", default=None, help="Cross-encoder path or name; unset = no rerank.")
@click.option("--hnsw-threshold", type=int, default=None, help="Vectors above which an index uses HNSW.")
@click.option("--load-sample-index/--no-load-sample-index", default=None, help="Create the 'sample' index.")
@click.option("--set", "extra", multiple=True, metavar="KEY=VALUE", help="Any other EngineSettings field.")
@click.option("--log-level", default="info", show_default=True)
def serve(host, port, data_dir, embedding_model, embedding_url, llm_url, rerank_model, hnsw_threshold,
          load_sample_index, extra, log_level) -> None:
    """Run the engine's HTTP server. Flags override RAGENGINE_* environment variables."""
    from ragengine.cli.malloc import limit_arenas

    limit_arenas()  # first, before any thread allocates (cli/malloc.py)
    from pydantic import ValidationError

    from ragengine.settings import EngineSettings
    from ragengine.validation import validation_message

    overrides = {k: v for k, v in {
        "host": host, "port": port or None, "data_dir": data_dir, "embedding_model": embedding_model,
        "embedding_url": embedding_url, "llm_url": llm_url, "rerank_model": rerank_model,
        "hnsw_threshold": hnsw_threshold, "load_sample_index": load_sample_index,
    }.items() if v is not None}
    overrides.update(_parse_set(extra))
    try:
        settings = EngineSettings(**overrides)
    except ValidationError as exc:
        raise click.ClickException(f"invalid settings: {validation_message(exc)}") from exc
    # JSON lines with the request's ids (or plain text: log_format); the engine's access line replaces uvicorn's.
    from ragengine.observability import logs

    logs.configure(settings.log_format, log_level)
    if not settings.process_dumpable:  # a parser child (same uid) cannot read our keys in /proc/<pid>/environ
        from ragengine.parsing.confine import undumpable

        if not undumpable():
            click.echo("warning: could not make the engine process non-dumpable", err=True)
    from ragengine.embedding import early

    early.start(settings)  # the model loads in a thread while the rest is imported and checked (embedding/early.py)
    from ragengine import formats, preflight

    try:  # before the app is even imported: data a newer engine wrote is refused (the app checks again at start)
        preflight.check(settings)
    except formats.FormatRefused as exc:
        raise click.ClickException(f"refusing to start: {exc}") from exc
    import uvicorn

    from ragengine.app import create_app

    check_data_dir(settings.data_dir)
    app = create_app(settings)
    # Bind before the model loads: a taken port fails at once, and the port is ours when this line is
    # printed (with --port 0, the kernel's choice: tests and scripts read it). Connections are refused
    # until the app has started (uvicorn listens after its start-up).
    import socket

    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, 0 if port == 0 else settings.port))
    except OSError as exc:
        raise click.ClickException(f"cannot bind {settings.host}:{settings.port}: {exc.strerror}") from exc
    bound = sock.getsockname()[1]
    click.echo(f"listening on http://{settings.host}:{bound}", err=True)
    # ws="none": the engine has no WebSocket route, so uvicorn need not import a WebSocket library to refuse upgrades
    config = uvicorn.Config(app, host=settings.host, port=bound, log_level=log_level.lower(), timeout_graceful_shutdown=30,
                            log_config=None, access_log=False, ws="none")
    from ragengine.shutdown import DrainingServer

    DrainingServer(config, app.state.drain, settings.shutdown_drain_seconds).run(sockets=[sock])
    handover = getattr(app.state, "handover", None)
    if handover is not None and handover.failure is not None:  # a stand-by that could not take its folder over
        raise click.ClickException(handover.failure)


def _collect(folder: Path, pattern: str) -> tuple[list[Path], int]:
    """The files to send, and how many matches were left out because a symbolic link leads out of
    ``folder`` (an untrusted checkout's ``README.md -> ~/.ssh/id_rsa`` must not be indexed)."""
    root = folder.resolve()

    def hidden(p: Path) -> bool:
        return any(part.startswith(".") for part in p.relative_to(folder).parts)

    files, outside = [], 0
    for p in folder.glob(pattern):
        if not p.is_file() or hidden(p):
            continue
        if p.resolve().is_relative_to(root):
            files.append(p)
        else:
            outside += 1
    return sorted(files), outside


@main.command("index")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--index", "index_name", required=True, help="Index to add the files to (created when new).")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The engine's base URL.")
@click.option("--glob", "pattern", default="**/*", show_default=True, help="Which files, relative to FOLDER.")
@click.option("--source", "source", default=None,
              help="Name of this set of files in the index: documents get ids '<source>:<path>' and metadata "
                   "source=<source> [default: FOLDER's name].")
@click.option("--batch-size", type=int, default=16, show_default=True, help="Files per request.")
@click.option("--code-aware/--no-code-aware", default=True, show_default=True,
              help="Mark source files split_type=code with their language.")
@click.option("--ocr-languages", default=None, help="Tesseract languages for scanned pages, e.g. eng+deu [eng].")
@click.option("--force", is_flag=True, help="Send every file, even those the index holds unchanged.")
@click.option("--prune", is_flag=True, help="Delete this source's documents whose file is no longer in FOLDER.")
@click.option("--strict", is_flag=True, help="Exit with status 1 when any file is skipped (the others are sent).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout (no progress bar).")
@click.option("--api-key", default=None, help=API_KEY_HELP)
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds per request.")
def index_folder(folder: Path, index_name: str, url: str, pattern: str, source: str | None, batch_size: int,
                 code_aware: bool, ocr_languages: str | None, force: bool, prune: bool, strict: bool, as_json: bool,
                 api_key: str | None, timeout: float) -> None:
    """Send the files under FOLDER that changed since the last run to the engine (an unchanged folder sends
    nothing: the index keeps each file's hash), and name every file skipped, with its reason."""
    import re

    import httpx
    from tqdm import tqdm

    from ragengine import indexer

    if ocr_languages is not None and not re.match(r"^[A-Za-z_]{3,16}(\+[A-Za-z_]{3,16})*$", ocr_languages):
        raise click.BadParameter("Tesseract language codes joined by '+', e.g. eng+deu", param_hint="--ocr-languages")
    files, outside = _collect(folder, pattern)
    if outside:
        click.echo(f"skipping {outside} symbolic link(s) that lead out of {folder}", err=True)
    if not files:
        raise click.ClickException(f"no files match {pattern!r} under {folder}")
    options = indexer.Options(source=source or folder.resolve().name, code_aware=code_aware,
                              ocr_languages=ocr_languages, force=force, prune=prune, batch_size=max(1, batch_size))
    with engine_client(url, api_key_from(api_key), timeout) as client, \
            tqdm(total=len(files), unit="file", desc=f"indexing into {index_name}", file=sys.stderr,
                 disable=as_json or None) as bar:
        try:
            report = indexer.index_folder(indexer.EngineIndex(client, index_name), folder, files, options, bar.update)
        except httpx.HTTPError as exc:
            raise click.ClickException(f"cannot reach {url}: {exc}") from exc
        except indexer.IndexingError as exc:
            raise click.ClickException(str(exc)) from exc
    report.outside = outside
    click.echo(report.to_json() if as_json else "\n".join(report.lines()))
    if strict and report.skipped:
        click.echo(f"error: {len(report.skipped)} file(s) skipped (--strict)", err=True)
        sys.exit(1)


def _target(url: str, prefix: str, dim: int):
    from ragengine.stores.milvus import MilvusStore
    from ragengine.stores.postgres.store import PostgresStore

    if url.startswith(("postgres://", "postgresql://", "postgresql+psycopg://")):
        return PostgresStore(url, schema=prefix, dim=dim)
    if url.startswith("milvus:"):
        return MilvusStore(url.removeprefix("milvus:"), prefix=prefix, dim=dim)
    raise click.BadParameter("use postgresql://USER:PASSWORD@HOST/DB or milvus:<uri or Milvus Lite file>",
                             param_hint="--to")


@main.command()
@click.option("--from", "source", required=True, metavar="faiss:DATA_DIR",
              help="The engine data directory holding the FAISS indexes (faiss:./data).")
@click.option("--to", "target", required=True, envvar="RAGENGINE_VECTOR_STORE_URL",
              help="postgresql://… DSN, or milvus:<uri> [env RAGENGINE_VECTOR_STORE_URL].")
@click.option("--prefix", default="ragengine", show_default=True, envvar="RAGENGINE_VECTOR_STORE_PREFIX",
              help="Schema / collection prefix in the target (the RAGEngine's vectorStore prefix).")
@click.option("--index", "only", multiple=True, help="Only this index (repeatable); default: every index.")
def migrate(source: str, target: str, prefix: str, only: tuple[str, ...]) -> None:
    """Copy FAISS indexes into PostgreSQL or Milvus with their vectors (no re-embedding); resumable."""
    from tqdm import tqdm

    from ragengine.formats import FormatRefused
    from ragengine.stores.base import StoreUnavailable
    from ragengine.versions import migrate as mig

    if not source.startswith("faiss:"):
        raise click.BadParameter("expected faiss:DATA_DIR", param_hint="--from")
    data_dir = Path(source.removeprefix("faiss:"))
    try:
        found = list(mig.faiss_indexes(data_dir))
    except (FileNotFoundError, ValueError, KeyError, FormatRefused) as exc:
        raise click.ClickException(str(exc)) from exc
    if not found:
        raise click.ClickException(f"no indexes under {data_dir}")
    bars: dict[str, tqdm] = {}

    def progress(name: str, done: int, total: int) -> None:
        bar = bars.get(name) or bars.setdefault(name, tqdm(total=total, unit="doc", desc=name, file=sys.stderr))
        bar.update(done - bar.n)

    try:
        report = mig.migrate(data_dir, _target(target, prefix, found[0][2]), only=list(only) or None, progress=progress)
    except StoreUnavailable as exc:
        raise click.ClickException(f"target store unavailable: {exc}") from exc
    finally:
        for bar in bars.values():
            bar.close()
    for name, counts in report.indexes.items():
        click.echo(f"{name}: {counts['documents']} documents ({counts['chunks']} chunks) copied, "
                   f"{counts['skipped']} already there, {counts['conflicts']} conflicting (left as they are)")


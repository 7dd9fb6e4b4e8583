"""The fast embedding path for a model given by folder: its ONNX export, made at start-up and cached by content.

A model named by path (``RAGENGINE_EMBEDDING_MODEL=/models/my-minilm``) has no install-time export, and torch
runs it 2.7x slower to ingest, with 2.1x the memory and 4.9x the start-up (issue 28, measured on the same
weights). So at start-up, on a CPU with ``embedding_backend`` auto (or a named export runtime):

- the export of that folder is looked up under ``<embedding_cache_dir or data_dir/models>/onnx/<content hash>``
  (the hash of every file's path and bytes: the same weights anywhere reuse one export, changed weights get
  a new one);
- when absent and torch, transformers, sentence-transformers and onnx import (the ``onnx-export`` extra),
  the folder is exported there (``export.export``: checked against sentence-transformers, cosine >= 0.999);
- else the engine runs torch and says so loudly, with the command that makes the export.

``/health`` (``embedding``) and the metric ``ragengine_embedding_backend{backend}`` name the backend in use.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import time
from pathlib import Path

from ragengine.settings import EngineSettings

log = logging.getLogger(__name__)
EXPORT_MODULES = ("torch", "transformers", "sentence_transformers", "onnx")


def content_hash(folder: Path) -> str:
    """sha256 over every file's relative path and bytes, in path order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with path.open("rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def model_cache(settings: EngineSettings) -> Path:
    """Where the engine keeps what it makes of a model (exports, their OpenVINO form): a volume in a cluster."""
    return Path(settings.embedding_cache_dir or settings.data_dir / "models")


def export_dir(settings: EngineSettings, folder: Path) -> Path:
    return model_cache(settings) / "onnx" / content_hash(folder)[:24]


def missing_export_modules() -> list[str]:
    missing = []
    for name in EXPORT_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a module set to None in sys.modules (blocked) or half-installed
            found = False
        if not found:
            missing.append(name)
    return missing


def ensure_export(settings: EngineSettings, model_dir: str) -> tuple[tuple[Path, Path] | None, str | None]:
    """((model dir, ONNX file) of the folder's export, or None; a note saying why torch runs, or None)."""
    from ragengine.embedding.export import ONNX_NAMES

    folder = Path(model_dir)
    if not (folder / "config.json").is_file():
        return None, None  # not a model folder (a hub name): nothing to export here
    out = export_dir(settings, folder)
    for name in ONNX_NAMES:
        if (out / name).is_file() and (out / "tokenizer.json").is_file():
            log.info("embedding model %s: using its ONNX export %s (cached by content hash)", folder, out)
            return (out, out / name), None
    missing = missing_export_modules()
    if missing:
        note = (f"embedding model {folder} runs on torch, the slow path (about 2.7x slower ingestion, 2x the memory): "
                f"it has no ONNX export and {', '.join(missing)} cannot be imported to make one. Fix: "
                f"pip install 'ragengine[onnx-export]' and restart, or run "
                f"'python -m ragengine.embedding.export --model {folder} --out {out}'")
        log.warning("%s\n%s\n%s", "!" * 100, note, "!" * 100)
        return None, note
    log.info("embedding model %s has no ONNX export: exporting it to %s once (cached by content hash)", folder, out)
    from ragengine.embedding.export import export

    t0 = time.perf_counter()
    try:
        worst = export(str(folder), out)
    except (Exception, SystemExit) as exc:  # export() exits when the export disagrees with the model
        note = f"embedding model {folder} runs on torch, the slow path: its ONNX export failed: {exc}"
        log.warning("%s\n%s\n%s", "!" * 100, note, "!" * 100)
        return None, note
    log.info("exported %s to %s in %.1f s (worst cosine against sentence-transformers %.6f)", folder, out,
             time.perf_counter() - t0, worst)
    return (out, out / "model.onnx"), None

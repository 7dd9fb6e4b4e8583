"""The OpenVINO form of an ONNX export, with its weights stored in 16 bits: made once, cached on disk, read mapped.

Where OpenVINO computes in bf16 (the default on a CPU with AVX512-BF16 or AMX), reading the fp32 ONNX file
held its weights in float32 in private memory for as long as the compiled models lived (106 MiB for
all-MiniLM-L6-v2), beside the compiled models' own bf16 copies. This IR (``openvino.save_model`` with
``compress_to_fp16``: a 45 MB ``model.bin``) is read with mmap (OpenVINO's default for IR files), so the read
model costs only the pages the compilation touches, and the compiled models convert the fp16 weights to bf16
as they did the fp32 ones. Measured (issue 45): the backend's RSS 283 -> 174 MiB, vectors within cosine
0.99997 of the fp32 path (docs/performance.md). Forced f32 inference keeps reading the ONNX file, exactly.

The IR lives in ``openvino/<key>/`` where ``key`` is the sha256 of the ONNX file's bytes (a changed export gets
a new IR): next to the ONNX file when it is one of ``export``'s folders (``export`` makes it there, so installs
and images ship it), else under the engine's model cache (``<embedding_cache_dir or data_dir/models>``), made
at the first start and reused by every later one. Made in a temporary folder and renamed into place, so a
reader never sees half an IR and two engines making it at once both end with a whole one.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

FORMAT = "f16"  # the weights' storage type; part of the key, so a different format is a different IR
SUBDIR = "openvino"
XML = "model.xml"
EXPORT_MARK = "ragengine_onnx.json"  # export.SETTINGS_FILE: a folder ``export`` made (not a user's model folder)


def onnx_key(onnx_file: Path) -> str:
    """sha256 of the ONNX file's bytes (read in blocks: the file is never held whole) and the IR format."""
    digest = hashlib.sha256(FORMAT.encode() + b"\0")
    with onnx_file.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()[:24]


def places(onnx_file: Path, cache_root: Path | None) -> list[Path]:
    """Where the IR of ``onnx_file`` may live, in lookup order (without the key)."""
    out = []
    if (onnx_file.parent / EXPORT_MARK).is_file():
        out.append(onnx_file.parent / SUBDIR)
    if cache_root is not None:
        out.append(Path(cache_root) / SUBDIR)
    return out


def make(onnx_file: Path, out: Path) -> Path:
    """Convert ``onnx_file`` into ``out/model.xml`` (+ ``model.bin``, fp16 weights), atomically; returns the
    XML file. When another process finished the same folder first, theirs is kept."""
    import openvino as ov

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it 0700: an image built as root is run by another user
    try:
        ov.save_model(ov.Core().read_model(str(onnx_file)), str(tmp / XML), compress_to_fp16=True)
        try:
            tmp.rename(out)
        except OSError:
            if not (out / XML).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / XML


def ensure(onnx_file: Path, cache_root: Path | None = None) -> Path | None:
    """The IR's XML file for ``onnx_file``: found, else made in the first place that can be written; None (the
    caller reads the ONNX file) when no place can be."""
    onnx_file = Path(onnx_file)
    key = onnx_key(onnx_file)
    candidates = [place / key for place in places(onnx_file, cache_root)]
    for folder in candidates:
        if (folder / XML).is_file():
            return folder / XML
    for folder in candidates:
        t0 = time.perf_counter()
        try:
            xml = make(onnx_file, folder)
        except (OSError, RuntimeError) as exc:  # a read-only install (or a conversion error): try the next place
            log.info("cannot write the OpenVINO form of %s in %s: %s", onnx_file, folder, exc)
            continue
        log.info("made the OpenVINO form of %s (fp16 weights) in %s in %.1f s, once", onnx_file, folder,
                 time.perf_counter() - t0)
        return xml
    log.warning("no writable place for the OpenVINO form of %s (tried %s): reading the ONNX file, with its "
                "weights in float32 in memory", onnx_file, ", ".join(map(str, candidates)) or "none")
    return None


def main(argv: list[str] | None = None) -> int:
    """``python -m ragengine.embedding.openvino_ir EXPORT_DIR/model.onnx``: make the IR beside an export (the
    image build, whose export stage has no OpenVINO)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(main.__doc__, file=sys.stderr)
        return 2
    onnx_file = Path(args[0])
    if not (onnx_file.parent / EXPORT_MARK).is_file():
        print(f"{onnx_file.parent} is not a folder made by ragengine.embedding.export", file=sys.stderr)
        return 2
    xml = ensure(onnx_file)
    print(f"OpenVINO form of {onnx_file}: {xml}")
    return 0 if xml is not None else 1


if __name__ == "__main__":
    sys.exit(main())

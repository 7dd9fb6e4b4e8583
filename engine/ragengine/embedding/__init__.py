"""Embedding models behind one small interface: ``Embedder`` (see ``core``).

Backends, one module each, imported only when chosen (``settings.embedding_backend``):
``openvino_backend`` and ``onnx_backend`` (OpenVINO / ONNX Runtime running the model's ONNX export, with
``tokenizers``, no torch; what they share is in ``exported``), ``torch_backend`` (sentence-transformers),
``remote`` (an OpenAI-compatible ``/v1/embeddings``), ``wordllama_backend`` (static embeddings shipped in
a wheel: the second, 256-dimension model). ``pool`` holds several models at once (one per index
version). ``export`` makes the ONNX file at install time.

The names below are ``core``'s, imported on first use: ``ragengine.embedding.early`` is imported by
``ragengine serve`` before anything else, and must not wait for ``core``'s imports (numpy, FastAPI).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder, build_embedder, pick_device
    from ragengine.embedding.locate import resolve_model_path

__all__ = ["Embedder", "build_embedder", "pick_device", "resolve_model_path"]


def __getattr__(name: str) -> Any:
    if name == "resolve_model_path":
        from ragengine.embedding import locate

        return locate.resolve_model_path
    if name in __all__:
        from ragengine.embedding import core

        return getattr(core, name)
    raise AttributeError(f"module 'ragengine.embedding' has no attribute {name!r}")

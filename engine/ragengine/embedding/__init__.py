"""Embedding models behind one small interface: ``Embedder`` (see ``core``).

Backends, one module each, imported only when chosen (``settings.embedding_backend``):
``onnx_backend`` (ONNX Runtime + ``tokenizers``, no torch), ``torch_backend`` (sentence-transformers),
``remote`` (an OpenAI-compatible ``/v1/embeddings``). ``export`` makes the ONNX file at install time.
"""

from ragengine.embedding.core import Embedder, build_embedder, pick_device, resolve_model_path

__all__ = ["Embedder", "build_embedder", "pick_device", "resolve_model_path"]

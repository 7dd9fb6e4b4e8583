"""Embedding models behind one small interface: ``Embedder`` (see ``core``).

Backends, one module each, imported only when chosen (``settings.embedding_backend``):
``openvino_backend`` and ``onnx_backend`` (OpenVINO / ONNX Runtime running the model's ONNX export, with
``tokenizers``, no torch; what they share is in ``exported``), ``torch_backend`` (sentence-transformers),
``remote`` (an OpenAI-compatible ``/v1/embeddings``), ``wordllama_backend`` (static embeddings shipped in
a wheel: the second, 256-dimension model). ``pool`` holds several models at once (one per index
version). ``export`` makes the ONNX file at install time.
"""

from ragengine.embedding.core import Embedder, build_embedder, pick_device
from ragengine.embedding.locate import resolve_model_path

__all__ = ["Embedder", "build_embedder", "pick_device", "resolve_model_path"]

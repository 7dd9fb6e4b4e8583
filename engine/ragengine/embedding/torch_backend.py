"""sentence-transformers (torch) as an embedding backend: ``encode`` for documents, and for queries with
the model's own ``query`` prompt when it defines one. Needed on GPUs and for models without an ONNX export."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ragengine.embedding.tokens import HFTokenizer

log = logging.getLogger(__name__)


class TorchBackend:
    name = "torch"

    def __init__(self, path: str, device: str, cache_dir: str | None, batch_size: int, max_tokens: int | None) -> None:
        from sentence_transformers import SentenceTransformer

        if not Path(path).exists():
            log.info("embedding model %r is not a local path: loading by name (cache %s)", path, cache_dir)
        self.model = SentenceTransformer(path, device=device, cache_folder=cache_dir)
        self.batch_size = batch_size
        st = self.model
        dim = st.get_embedding_dimension() if hasattr(st, "get_embedding_dimension") else st.get_sentence_embedding_dimension()
        assert dim is not None, f"{path}: the model does not report its embedding dimension"
        self.dim = int(dim)
        self.max_tokens = int(st.max_seq_length or max_tokens or 512)
        self.tokenizer = HFTokenizer(st.tokenizer)
        self._query_prompt = "query" if "query" in (getattr(st, "prompts", None) or {}) else None

    def _encode(self, texts: list[str], prompt_name: str | None = None) -> np.ndarray:
        return self.model.encode(texts, batch_size=self.batch_size, prompt_name=prompt_name, convert_to_numpy=True,
                                 normalize_embeddings=True, show_progress_bar=False)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, self._query_prompt)

    def close(self) -> None:
        pass

"""WordLlama's static embeddings as a backend: ``embedding_model: "wordllama:<config>"`` (``l2_supercat``, 256
dimensions, shipped inside the ``wordllama`` wheel with its tokenizer).

A second installable model of another dimension than the default's 384, so switching models (re-indexing,
docs/versions.md) is exercised offline. Static embeddings: a token-embedding table averaged over the
text, ~20,000 passages/s on one core and 16 MB of weights, with lower quality than a transformer.

Loading trap (wordllama 0.4): ``WordLlama.load()`` looks for the tokenizer under ``wordllama/tokenizer/``
while the wheel ships ``wordllama/tokenizers/``, misses it and tries Hugging Face. Passing the package's own
folder as ``cache_dir`` with ``disable_download=True`` finds both files and never touches the network.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ragengine.embedding.tokens import FastTokenizer

PREFIX = "wordllama:"
DEFAULT_CONFIG = "l2_supercat"
# A static model has no window: chunks are cut at this many tokens so they stay passages, as with MiniLM.
MAX_TOKENS = 256


class WordLlamaBackend:
    name = "wordllama"

    def __init__(self, model: str, batch_size: int) -> None:
        # wordllama configures the root logger on import (logging.basicConfig): undo that.
        root = logging.getLogger()
        level, handlers = root.level, list(root.handlers)
        import wordllama
        from wordllama import WordLlama

        root.setLevel(level)
        root.handlers[:] = handlers
        config = model[len(PREFIX):] or DEFAULT_CONFIG
        self.model = WordLlama.load(config=config, cache_dir=Path(wordllama.__file__).parent, disable_download=True)
        self.batch_size = batch_size
        self.dim = int(self.model.embedding.shape[1])
        self.max_tokens = MAX_TOKENS
        self.tokenizer = FastTokenizer(self.model.tokenizer)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.model.embed(texts, norm=True, batch_size=self.batch_size), dtype=np.float32)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed_documents(texts)

    def close(self) -> None:
        pass

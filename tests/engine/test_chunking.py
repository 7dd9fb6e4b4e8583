"""Chunking with the real embedding tokenizer: bounded by the model's limit, spans, code splitting."""

from __future__ import annotations

import pytest

from ragengine.errors import BadRequest
from ragengine.index.chunking import Chunker, split_sentences
from ragengine.index.types import ChunkingConfig

CODE = "\n".join(
    f"def function_{i}(x):\n    '''Compute thing {i}.'''\n    y = x * {i}\n    return y + {i}\n" for i in range(60)
)


def _texts(text: str, spans: list) -> list[str]:
    return [s if isinstance(s, str) else text[s[0]:s[1]] for s in spans]


def test_default_chunks_fit_the_model(embedder):
    chunker = Chunker(embedder, ChunkingConfig())
    assert chunker.config.chunk_size == embedder.max_tokens - 2 == 254
    text = " ".join(f"Sentence number {i} explains a small fact about retrieval systems." for i in range(300))
    spans = chunker.split(text, {})
    chunks = _texts(text, spans)
    assert len(chunks) > 5
    assert all(embedder.count_tokens(c) <= 254 for c in chunks)
    assert all(isinstance(s, tuple) for s in spans), "prose chunks are spans into the text (one copy)"


def test_oversized_request_is_capped(embedder):
    chunker = Chunker(embedder, ChunkingConfig(chunk_size=1024, chunk_overlap=200))
    assert chunker.config.chunk_size == 254 and chunker.config.chunk_overlap <= 127


def test_unbreakable_text_is_cut_at_token_boundaries(embedder):
    chunker = Chunker(embedder, ChunkingConfig(chunk_size=64, chunk_overlap=0))
    text = "x" * 5000  # no spaces, no sentences
    chunks = _texts(text, chunker.split(text, {}))
    assert "".join(chunks) == text
    assert all(embedder.count_tokens(c) <= 254 for c in chunks)


def test_code_split_requires_language(embedder):
    chunker = Chunker(embedder, ChunkingConfig())
    with pytest.raises(BadRequest, match="Language not specified"):
        chunker.split(CODE, {"split_type": "code"})


@pytest.mark.parametrize("language", ["python", "no-such-language"])
def test_code_split_keeps_functions_whole(embedder, language):
    chunker = Chunker(embedder, ChunkingConfig(chunk_size=128))
    chunks = _texts(CODE, chunker.split(CODE, {"split_type": "code", "language": language}))
    assert len(chunks) > 3
    assert all(embedder.count_tokens(c) <= 254 for c in chunks)
    # Every function definition lands whole in some chunk (line or tree-sitter splitting).
    for i in (0, 17, 59):
        fn = f"def function_{i}(x):\n    '''Compute thing {i}.'''\n    y = x * {i}\n    return y + {i}"
        assert any(fn in c for c in chunks), fn


def test_invalid_splitter(embedder):
    with pytest.raises(BadRequest, match="Unknown splitter"):
        Chunker(embedder, ChunkingConfig(splitter="paragraph"))


def test_sentence_split_is_lossless():
    text = "One. Two!  Three?\nFour"
    assert "".join(split_sentences(text)) == text
    assert len(split_sentences(text)) == 4

"""Groundedness: how well an answer's sentences are supported by the context it was given.

Per answer sentence (sentences with fewer than ``MIN_WORDS`` content words, like "Sure!", are not
scored):

- lexical support: the share of the sentence's content words (stop words dropped, lower-cased, a
  light plural strip) that occur anywhere in the context;
- semantic support: the best cosine similarity between the sentence's embedding and any context
  sentence's embedding (the engine's embedding model), clamped to [0, 1];
- support = ``LEXICAL_WEIGHT`` * lexical + (1 - ``LEXICAL_WEIGHT``) * semantic; a sentence with
  support >= ``SENTENCE_THRESHOLD`` counts as supported.

The answer's score is the mean support over scored sentences, weighted by content-word count so a
long invented sentence outweighs a short greeting; it is flagged when the score is below the
engine's ``groundedness_threshold``. Deterministic: no sampling, a fixed model, a fixed sentence
cap (``MAX_CONTEXT_SENTENCES``, taken from the most relevant chunks first).

This is a cheap screen, not a verifier: it catches invented content and answers from general
knowledge, not a sentence that reuses the context's words to say something false.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ragengine.rag.text import content_words, split_sentences

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder

LEXICAL_WEIGHT = 0.5
SENTENCE_THRESHOLD = 0.5
MIN_WORDS = 2
MAX_CONTEXT_SENTENCES = 256
MAX_ANSWER_SENTENCES = 64


@dataclass
class SentenceSupport:
    text: str
    lexical: float
    semantic: float
    support: float
    supported: bool

    def to_dict(self) -> dict:
        return {"text": self.text, "lexical": round(self.lexical, 4), "semantic": round(self.semantic, 4),
                "support": round(self.support, 4), "supported": self.supported}


@dataclass
class GroundednessReport:
    score: float | None
    flagged: bool
    threshold: float
    sentences: list[SentenceSupport] = field(default_factory=list)
    method: str = "lexical+embedding"

    @property
    def unsupported(self) -> list[str]:
        return [s.text for s in self.sentences if not s.supported]

    def to_dict(self, *, details: bool = True) -> dict:
        out: dict = {"score": None if self.score is None else round(self.score, 4), "flagged": self.flagged,
               "threshold": self.threshold, "method": self.method,
               "sentences_scored": len(self.sentences), "unsupported_sentences": self.unsupported}
        if details:
            out["sentences"] = [s.to_dict() for s in self.sentences]
        return out


def lexical_support(sentence_words: list[str], context_vocab: set[str]) -> float:
    if not sentence_words:
        return 0.0
    return sum(1 for w in sentence_words if w in context_vocab) / len(sentence_words)


def combine(sentences: list[str], lexical: list[float], semantic: list[float] | None,
            weights: list[int], threshold: float) -> GroundednessReport:
    """Pure: per-sentence supports → the report (``semantic`` None = lexical only)."""
    rows = []
    for i, text in enumerate(sentences):
        sem = semantic[i] if semantic is not None else lexical[i]
        support = LEXICAL_WEIGHT * lexical[i] + (1 - LEXICAL_WEIGHT) * sem
        rows.append(SentenceSupport(text, lexical[i], sem, support, support >= SENTENCE_THRESHOLD))
    if not rows:
        return GroundednessReport(None, False, threshold, [], "none")
    score = float(np.average([r.support for r in rows], weights=weights))
    method = "lexical+embedding" if semantic is not None else "lexical"
    return GroundednessReport(score, score < threshold, threshold, rows, method)


async def assess_groundedness(answer: str, contexts: list[str], *, threshold: float,
                              embedder: Embedder | None = None) -> GroundednessReport:
    """Score ``answer`` against ``contexts`` (most relevant first). No context → score None, not flagged."""
    if not contexts or not any(c.strip() for c in contexts):
        return GroundednessReport(None, False, threshold, [], "none")
    sentences, weights = [], []
    for s in split_sentences(answer)[:MAX_ANSWER_SENTENCES]:
        words = content_words(s)
        if len(words) >= MIN_WORDS:
            sentences.append(s)
            weights.append(len(words))
    vocab: set[str] = set()
    context_sentences: list[str] = []
    for text in contexts:
        vocab.update(content_words(text))
        for s in split_sentences(text):
            if len(context_sentences) < MAX_CONTEXT_SENTENCES:
                context_sentences.append(s)
    if not sentences:
        return GroundednessReport(None, False, threshold, [], "none")
    lexical = [lexical_support(content_words(s), vocab) for s in sentences]
    semantic = None
    if embedder is not None and context_sentences:
        vectors = await embedder.embed_texts(sentences + context_sentences)
        vectors = np.asarray(vectors, dtype=np.float32)
        answer_vecs, context_vecs = vectors[: len(sentences)], vectors[len(sentences):]
        sims = answer_vecs @ context_vecs.T  # unit vectors: dot = cosine
        semantic = [float(min(1.0, max(0.0, row.max()))) for row in sims]
    return combine(sentences, lexical, semantic, weights, threshold)

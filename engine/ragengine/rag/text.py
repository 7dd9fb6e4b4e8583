"""Text primitives shared by the rag layer: one stop-word list, one sentence splitter, content words.

Pure and dependency-free. Used by the extractive answer (sentence scoring) and groundedness (support
of an answer's sentences); one list so both agree on what a "content word" is.
"""

from __future__ import annotations

import re

# A sentence ends at . ! ? before a capital/digit (optionally quoted), at a blank line, or before a bullet.
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n{2,}|\n(?=\s*[-*•]\s)")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)

STOP_WORDS = frozenset({
    "a", "about", "according", "all", "also", "an", "and", "any", "are", "as", "at", "based", "be", "been", "but",
    "by", "can", "context", "could", "describe", "did", "do", "does", "document", "documents", "explain", "for",
    "from", "give", "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "more",
    "most", "my", "no", "not", "of", "on", "only", "or", "other", "our", "please", "provided", "so", "some",
    "such", "tell", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
    "to", "very", "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "would",
    "yes", "you", "your"
})


def split_sentences(text: str) -> list[str]:
    """Sentences (and list items, paragraphs) of ``text``, stripped; fragments of one character dropped."""
    return [s.strip() for s in _SENTENCE.split(text) if s and len(s.strip()) > 1]


def content_words(text: str) -> list[str]:
    """Lower-cased words of ``text`` without stop words and one-letter words, with a light plural strip
    ("vectors" → "vector") so a question and its answer match across number."""
    words = []
    for w in (m.lower() for m in _WORD.findall(text)):
        if w in STOP_WORDS or len(w) < 2:
            continue
        if len(w) > 4 and w.endswith("s") and not w.endswith("ss"):
            w = w[:-1]
        words.append(w)
    return words

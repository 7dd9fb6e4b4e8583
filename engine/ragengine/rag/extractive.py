"""Extractive answers: the most relevant retrieved sentences, for when no LLM can answer.

Used with no LLM configured or every LLM endpoint unreachable; the response says so
(``generation_method: "extractive_fallback"``, ``fallback_reason``). Pure and fast: sentences are
scored by IDF-weighted overlap with the query's words, plus the chunk's own retrieval similarity, so
a sentence from a highly ranked chunk wins ties. Output keeps each chosen sentence verbatim.
"""

from __future__ import annotations

import math
from collections import Counter

from ragengine.rag.text import content_words, split_sentences

NO_ANSWER = "I could not find anything relevant to your question in the indexed documents."


def extractive_answer(query: str, nodes: list, *, max_sentences: int = 3) -> str:
    """Answer ``query`` with up to ``max_sentences`` sentences taken from ``nodes`` (RetrievedNode-like)."""
    candidates: list[tuple[int, int, str, float]] = []  # (node rank, position, sentence, node score)
    for rank, node in enumerate(nodes):
        for pos, sentence in enumerate(split_sentences(node.text)):
            candidates.append((rank, pos, sentence, float(node.score or 0.0)))
    if not candidates:
        return ""
    query_words = set(content_words(query))
    doc_freq = Counter(w for _, _, s, _ in candidates for w in set(content_words(s)))
    n = len(candidates)

    def score(item: tuple[int, int, str, float]) -> float:
        rank, pos, sentence, node_score = item
        words = set(content_words(sentence))
        overlap = sum(math.log(1 + n / doc_freq[w]) for w in words & query_words)
        norm = math.sqrt(len(words)) if words else 1.0
        # Lexical match first; then the chunk's similarity and rank; earlier sentences break ties.
        return overlap / norm + 0.5 * node_score + 0.1 / (1 + rank) + 0.01 / (1 + pos)

    ranked = sorted(candidates, key=score, reverse=True)
    chosen: list[str] = []
    seen: set[str] = set()
    for _, _, sentence, _ in ranked:
        key = sentence.lower()
        if key in seen:
            continue
        seen.add(key)
        chosen.append(sentence)
        if len(chosen) >= max_sentences:
            break
    return " ".join(chosen)

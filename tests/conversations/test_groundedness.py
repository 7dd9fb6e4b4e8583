"""Groundedness: supported answers score high, invented ones are flagged; deterministic."""

from __future__ import annotations

import pytest

from ragengine.rag.groundedness import assess_groundedness, combine, lexical_support
from ragengine.rag.text import content_words

CONTEXT = [
    "The Mushroom Soup takes 25 minutes to cook. It needs button mushrooms, cream and thyme.",
    "The Chickpea Risotto takes 45 minutes and uses arborio rice, chickpeas and parmesan.",
]
SUPPORTED = "The Mushroom Soup is the quickest: it takes 25 minutes to cook. It needs mushrooms, cream and thyme."
UNSUPPORTED = "The Eiffel Tower was completed in 1889 for the World's Fair. Paris hosts millions of tourists every year."


class SyncEmbedder:
    """The engine's embedder used from the test thread (its async API belongs to the server loop)."""

    def __init__(self, embedder):
        self.embedder = embedder

    async def embed_texts(self, texts):
        return self.embedder.embed_texts_sync(texts)


@pytest.fixture(scope="module")
def embedder(embedder):
    """The run's packaged embedding model (the root conftest's), called from the test thread."""
    return SyncEmbedder(embedder)


def test_lexical_support_pure():
    vocab = set(content_words(" ".join(CONTEXT)))
    assert lexical_support(content_words("Mushroom soup takes minutes"), vocab) == 1.0
    assert lexical_support(content_words("Eiffel tower Paris"), vocab) == 0.0
    report = combine(["a b", "c d"], [1.0, 0.0], None, [1, 3], 0.5)
    assert report.score == pytest.approx(0.25) and report.flagged and report.unsupported == ["c d"]


async def test_supported_answer_is_not_flagged(embedder):
    report = await assess_groundedness(SUPPORTED, CONTEXT, threshold=0.5, embedder=embedder)
    assert report.score > 0.7 and not report.flagged and report.method == "lexical+embedding"
    assert all(s.supported for s in report.sentences)


async def test_unsupported_answer_is_flagged(embedder):
    report = await assess_groundedness(UNSUPPORTED, CONTEXT, threshold=0.5, embedder=embedder)
    assert report.score < 0.3 and report.flagged and len(report.unsupported) == 2


async def test_mixed_answer_names_the_invented_sentence(embedder):
    answer = SUPPORTED + " The soup was invented by Napoleon during the Russian campaign."
    report = await assess_groundedness(answer, CONTEXT, threshold=0.5, embedder=embedder)
    assert report.unsupported == ["The soup was invented by Napoleon during the Russian campaign."]


async def test_deterministic_and_no_context_is_not_scored(embedder):
    a = await assess_groundedness(SUPPORTED, CONTEXT, threshold=0.5, embedder=embedder)
    b = await assess_groundedness(SUPPORTED, CONTEXT, threshold=0.5, embedder=embedder)
    assert a.to_dict() == b.to_dict()
    none = await assess_groundedness(SUPPORTED, [], threshold=0.5, embedder=embedder)
    assert none.score is None and not none.flagged

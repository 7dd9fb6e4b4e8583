"""The checks every store shares before a retrieval (``index.documents.retrieval_request``), pure."""

from __future__ import annotations

import pytest

from ragengine.errors import BadRequest
from ragengine.index.documents import retrieval_request
from ragengine.retrieval.filters import Compound, Condition


def request(query="q", top_k=5, *, filters=None, metadata_filter=None, cap=None, max_top_k=300):
    return retrieval_request(query, top_k, filters=filters, metadata_filter=metadata_filter,
                             max_chunks_per_document=cap, max_top_k=max_top_k)


@pytest.mark.parametrize("kwargs, message", [
    ({"query": "  "}, "Query string cannot be empty."),
    ({"query": None}, "Query string cannot be empty."),
    ({"top_k": 0}, "top_k must be at least 1."),
    ({"cap": 0}, "max_chunks_per_document must be at least 1."),
    # Every check fails: the first in the documented order answers, on every store alike.
    ({"query": "", "top_k": 0, "cap": 0, "filters": {"type": "nope"}}, "Query string cannot be empty."),
    ({"top_k": 0, "cap": 0, "filters": {"type": "nope"}}, "top_k must be at least 1."),
    ({"cap": 0, "filters": {"type": "nope"}}, "max_chunks_per_document must be at least 1."),
])
def test_bad_retrievals_are_400_in_one_order(kwargs, message):
    with pytest.raises(BadRequest) as err:
        request(**kwargs)
    assert err.value.message == message


def test_top_k_is_capped_and_both_filters_apply():
    req = request(top_k=1000, max_top_k=300, cap=2, filters={"type": "eq", "key": "a", "value": 1},
                  metadata_filter={"b": "x"})
    assert (req.query, req.top_k, req.max_chunks_per_document) == ("q", 300, 2)
    assert req.filter == Compound("and", (Condition("eq", "a", 1), Condition("eq", "b", "x")))
    assert request().filter is None and request().top_k == 5

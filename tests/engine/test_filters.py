"""Structured metadata filters: every operator, nesting, quoting, and invalid input."""

from __future__ import annotations

import pytest

from ragengine.errors import BadRequest
from ragengine.retrieval.filters import from_metadata_filter, matches, parse_filters

META = {"author": "O'Brien \"Bob\"", "year": 2024, "score": 0.5, "tags": ["a", "b"], "draft": False,
        "date": "2024-05-01"}


def m(f: dict, meta: dict = META) -> bool:
    return matches(parse_filters(f), meta)


@pytest.mark.parametrize(
    "flt,expected",
    [
        ({"type": "eq", "key": "author", "value": "O'Brien \"Bob\""}, True),
        ({"type": "eq", "key": "author", "value": "O'Brien"}, False),
        ({"type": "eq", "key": "year", "value": 2024}, True),
        ({"type": "eq", "key": "year", "value": 2024.0}, True),
        ({"type": "eq", "key": "draft", "value": False}, True),
        ({"type": "eq", "key": "draft", "value": 0}, False),  # booleans only equal booleans
        ({"type": "eq", "key": "tags", "value": "b"}, True),  # list metadata: contains
        ({"type": "eq", "key": "missing", "value": 1}, False),
        ({"type": "ne", "key": "year", "value": 2023}, True),
        ({"type": "ne", "key": "year", "value": 2024}, False),
        ({"type": "ne", "key": "missing", "value": 1}, True),
        ({"type": "gt", "key": "year", "value": 2023}, True),
        ({"type": "gt", "key": "year", "value": 2024}, False),
        ({"type": "gte", "key": "year", "value": 2024}, True),
        ({"type": "lt", "key": "score", "value": 0.6}, True),
        ({"type": "lte", "key": "score", "value": 0.5}, True),
        ({"type": "lt", "key": "score", "value": 0.5}, False),
        ({"type": "gt", "key": "date", "value": "2024-01-01"}, True),  # ISO strings compare as strings
        ({"type": "gt", "key": "author", "value": 3}, False),  # mismatched types never match
        ({"type": "gt", "key": "missing", "value": 3}, False),
        ({"type": "in", "key": "year", "value": [2023, 2024]}, True),
        ({"type": "in", "key": "year", "value": [2022]}, False),
        ({"type": "in", "key": "tags", "value": ["z", "a"]}, True),
        ({"type": "nin", "key": "year", "value": [2022]}, True),
        ({"type": "nin", "key": "tags", "value": ["a"]}, False),
        ({"type": "nin", "key": "missing", "value": ["a"]}, True),
    ],
)
def test_operators(flt, expected):
    assert m(flt) is expected


def test_nested_and_or():
    f = {"type": "or", "filters": [
        {"type": "and", "filters": [{"type": "eq", "key": "year", "value": 2020},
                                    {"type": "eq", "key": "draft", "value": False}]},
        {"type": "and", "filters": [{"type": "gte", "key": "score", "value": 0.5},
                                    {"type": "or", "filters": [{"type": "eq", "key": "tags", "value": "q"},
                                                               {"type": "in", "key": "author", "value": ["O'Brien \"Bob\""]}]}]},
    ]}
    assert m(f) is True
    f["filters"][1]["filters"][0]["value"] = 0.9
    assert m(f) is False


@pytest.mark.parametrize(
    "bad,fragment",
    [
        ({"type": "like", "key": "a", "value": 1}, "unknown type"),
        ({"type": "eq", "value": 1}, "key"),
        ({"type": "eq", "key": "a"}, "value"),
        ({"type": "eq", "key": "a", "value": {"x": 1}}, "string, number or boolean"),
        ({"type": "in", "key": "a", "value": 1}, "list"),
        ({"type": "in", "key": "a", "value": []}, "list"),
        ({"type": "gt", "key": "a", "value": True}, "number or string"),
        ({"type": "and", "filters": []}, "non-empty"),
        ({"type": "and", "filters": [{"type": "eq", "key": "a", "value": 1}], "x": 1}, "unexpected"),
        ("eq", "expected an object"),
        ({"type": "and", "filters": ["x"]}, "filters.filters[0]"),
    ],
)
def test_invalid_filters_are_400(bad, fragment):
    with pytest.raises(BadRequest) as err:
        parse_filters(bad)
    assert fragment in err.value.message
    assert err.value.status_code == 400


def test_too_deep_is_rejected():
    f: dict = {"type": "eq", "key": "a", "value": 1}
    for _ in range(12):
        f = {"type": "and", "filters": [f]}
    with pytest.raises(BadRequest):
        parse_filters(f)


def test_kaito_metadata_filter():
    assert matches(from_metadata_filter({"author": "O'Brien \"Bob\"", "year": 2024}), META)
    assert not matches(from_metadata_filter('{"year": 2023}'), META)
    assert from_metadata_filter({}) is None
    with pytest.raises(BadRequest):
        from_metadata_filter("{bad")
    with pytest.raises(BadRequest):
        from_metadata_filter("[1]")

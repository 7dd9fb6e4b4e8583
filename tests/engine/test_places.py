"""A document's structure, the stretches the chunker splits on their own, each chunk's place and its
citation text (index/structure.py, index/places.py, parsing/units.py). Pure: no model, no server."""

from __future__ import annotations

from collections import Counter

import pytest

from ragengine.index.places import chunk_place, chunk_places, citation, node_metadata
from ragengine.index.structure import compute_parts, stretches
from ragengine.parsing.pdf import heading_levels, page_blocks
from ragengine.parsing.units import label, units


def words(text: str) -> int:
    return len(text.split())


def spans_of(text: str, size: int) -> list[str]:
    return [text[s:e].strip() for s, e, _ in stretches(text, words, size)]


def test_labels_round_trip_and_only_whole_lines_count():
    assert [label({"page": 3}), label({"slide": 2, "slide_title": "x"}), label({"sheet": "Q3 sales"})] == [
        "[page 3]", "[slide 2]", "[sheet Q3 sales]"]
    text = "[page 1]\nOne.\n[page 2]\nsee [page 9] inline\n[sheet a:b]\n[slide 0]\n[sheet Notes]\nx"
    assert [(k, v) for _, _, k, v in units(text)] == [("page", 1), ("page", 2), ("sheet", "Notes")]


def test_sections_stay_apart_small_siblings_merge_and_tables_stand_alone():
    body = "This section holds several sentences of real text about one topic. " * 5  # 55 words: not small
    text = (f"# Handbook\n\n## Leave\n\n### Sabbatical\n\n{body}\n\n### Parental leave\n\n{body}\n\n"
            "## Contacts\n\n### Office\n\nRoom 4.\n\n### Phone\n\nExtension 12.\n\n"
            "### Rooms\n\n| Room | Floor |\n| --- | --- |\n| 4 | 1 |\n")
    assert spans_of(text, 100) == [
        f"# Handbook\n\n## Leave\n\n### Sabbatical\n\n{body.strip()}",  # the headings above go with it
        f"### Parental leave\n\n{body.strip()}",
        "## Contacts\n\n### Office\n\nRoom 4.\n\n### Phone\n\nExtension 12.",  # small siblings: one chunk
        "### Rooms\n\n| Room | Floor |\n| --- | --- |\n| 4 | 1 |",  # a table is never merged
    ]
    first, _, contacts, _ = [(s, e) for s, e, _ in stretches(text, words, 100)]
    assert chunk_place(text, {}, first) == {"heading_path": ["Handbook", "Leave", "Sabbatical"]}
    assert chunk_place(text, {"title": "Handbook"}, contacts) == {
        "heading_path": ["Handbook", "Contacts"], "sections": ["Office", "Phone"]}


def test_slides_never_merge_pages_do_and_labels_start_no_chunk():
    slides = "[slide 1]\n\n# Slide 1: A\n\nShort.\n\n[slide 2]\n\n# Slide 2: B\n\nShort too."
    assert spans_of(slides, 100) == ["# Slide 1: A\n\nShort.", "# Slide 2: B\n\nShort too."]
    pages = "[page 1]\n\n# Intro\n\nOne line.\n\n[page 2]\n\nAnother line.\n\n[page 3]\n\n" + "Long page text. " * 40
    (a, b), (c, d) = [(s, e) for s, e, _ in stretches(pages, words, 100)]
    assert chunk_place(pages, {}, (a, b)) == {"heading_path": ["Intro"], "pages": [1, 2]}
    assert chunk_place(pages, {}, (c, d)) == {"heading_path": ["Intro"], "page": 3}


def test_a_chunk_ending_with_the_next_heading_is_not_in_that_section():
    text = "# A\n\nText of A.\n\n# B\n\nText of B."
    end_of_b_heading = text.index("Text of B")
    assert chunk_place(text, {}, (0, end_of_b_heading)) == {"heading_path": ["A"]}


def test_code_places_are_lines_and_definitions():
    code = "import os\n\n\nclass Pump:\n    def start(self):\n        return 1\n\n    def stop(self):\n        return 0\n"
    meta = {"split_type": "code", "language": "python"}
    start = code.index("    def start")
    assert chunk_place(code, meta, (start, code.index("        return 1") + 16)) == {
        "lines": [5, 6], "heading_path": ["Pump", "start"]}
    whole, cls = chunk_places(code, meta, [(0, len(code)), (code.index("class"), len(code))])
    assert whole == {"lines": [1, 9]}  # one definition in it: nothing to list
    assert cls == {"lines": [4, 9], "heading_path": ["Pump"], "sections": ["start", "stop"]}


@pytest.mark.parametrize("meta, expected", [
    ({"filename": "handbook.pdf", "page": 41}, "handbook.pdf, p. 41"),
    ({"file_name": "handbook.pdf", "pages": [41, 42]}, "handbook.pdf, pp. 41–42"),
    ({"path": "decks/launch.pptx", "slide": 3}, "decks/launch.pptx, slide 3"),
    ({"filename": "prices.xlsx", "sheet": "Q3"}, "prices.xlsx, sheet Q3"),
    ({"path": "pump.py", "lines": [10, 42]}, "pump.py, lines 10–42"),
    ({"title": "Guide", "heading_path": ["Guide", "Install"]}, "Guide, Install"),
    ({"title": "Guide", "heading_path": ["Guide"]}, "Guide"),
    ({"filename": "old.pdf", "pages": 12}, "old.pdf"),  # a count from before (not a range) is no place
    ({}, "doc-1"),
])
def test_one_citation_formatter(meta, expected):
    assert citation(meta, "doc-1") == expected


def test_a_documents_own_place_wins_and_every_node_has_a_citation():
    out = node_metadata({"filename": "a.pdf", "page": 7}, {"page": 2, "heading_path": ["X"]}, "d")
    assert out == {"filename": "a.pdf", "page": 7, "heading_path": ["X"], "citation": "a.pdf, p. 7"}


def test_pdf_headings_come_from_font_sizes():
    sizes = Counter({10.0: 5000, 18.0: 60, 14.0: 200, 8.0: 900, 30.0: 3000})
    assert heading_levels(sizes) == {18.0: 1, 14.0: 2}  # 30 pt is a quarter of the text: body, not heading
    items = [("line", "Restarting", 18.0), ("line", "the pump", 18.0), ("line", "Hold the switch.", 10.0),
             ("line", "Ten seconds.", 10.0), ("line", "Notes", 14.0), ("table", "| a |\n| --- |", 0.0)]
    assert page_blocks(items, {18.0: 1, 14.0: 2}) == [
        "# Restarting the pump", "Hold the switch.\nTen seconds.", "## Notes", "| a |\n| --- |"]


def test_parts_know_their_unit_and_body():
    text = "[page 1]\n\n# Title\n\n[page 2]\n\nBody."
    every = compute_parts(text)
    assert [(p.path, p.unit("page"), p.has_body) for p in every] == [
        ((), 1, False), (("Title",), 1, False), (("Title",), 2, True)]

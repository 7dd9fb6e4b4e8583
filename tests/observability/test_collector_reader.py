"""The test collector's reader (tests/support/otelcol.py) takes only the lines the file exporter has finished."""

from __future__ import annotations

import json

from tests.support.otelcol import Collector

LINE = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "engine"}}]},
                           "scopeSpans": [{"spans": [{"name": "POST /retrieve", "attributes": []}]}]}]}


def test_a_line_still_being_written_is_left_for_the_next_read(tmp_path):
    out = tmp_path / "spans.jsonl"
    whole = json.dumps(LINE) + "\n"
    out.write_text(whole + whole[:40])  # the exporter is half-way through its second line
    collector = Collector(grpc="", http="", out=out)
    assert [(s["name"], s["service"]) for s in collector.spans()] == [("POST /retrieve", "engine")]
    out.write_text(whole * 2)
    assert len(collector.spans()) == 2

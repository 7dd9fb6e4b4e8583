"""A streamed response's server-sent events, in OpenAI's names and order. Pure string building.

Each event is ``event: <type>`` and ``data: <json with "type" and "sequence_number">``, numbered from 0;
the stream ends after ``response.completed`` (or ``response.failed``), without ``[DONE]``, as OpenAI's does.
The order for a response with ``file_search``::

    response.created, response.in_progress,
    response.output_item.added (file_search_call), response.file_search_call.in_progress,
    response.file_search_call.searching, response.file_search_call.completed,
    response.output_item.done (file_search_call),
    response.output_item.added (message), response.content_part.added,
    response.output_text.delta ..., response.output_text.annotation.added ...,
    response.output_text.done, response.content_part.done, response.output_item.done (message),
    response.completed
"""

from __future__ import annotations

import json
from typing import Any


class EventWriter:
    def __init__(self) -> None:
        self.sequence = 0

    def __call__(self, kind: str, **fields: Any) -> str:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'), ensure_ascii=False, default=str)}\n\n"


def search_events(emit: EventWriter, call: dict, index: int) -> list[str]:
    """The file_search call's events; the search itself ran before the stream opened."""
    started = {**call, "status": "in_progress", "results": None}
    where = {"output_index": index, "item_id": call["id"]}
    return [
        emit("response.output_item.added", output_index=index, item=started),
        emit("response.file_search_call.in_progress", **where),
        emit("response.file_search_call.searching", **where),
        emit("response.file_search_call.completed", **where),
        emit("response.output_item.done", output_index=index, item=call),
    ]


def message_start(emit: EventWriter, item: dict, index: int) -> list[str]:
    empty = {**item, "status": "in_progress", "content": []}
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    return [
        emit("response.output_item.added", output_index=index, item=empty),
        emit("response.content_part.added", output_index=index, item_id=item["id"], content_index=0, part=part),
    ]


def text_delta(emit: EventWriter, item_id: str, index: int, delta: str) -> str:
    return emit("response.output_text.delta", output_index=index, item_id=item_id, content_index=0, delta=delta,
                logprobs=[])


def message_end(emit: EventWriter, item: dict, index: int) -> list[str]:
    part = item["content"][0]
    where = {"output_index": index, "item_id": item["id"], "content_index": 0}
    events = [emit("response.output_text.annotation.added", **where, annotation_index=i, annotation=a)
              for i, a in enumerate(part["annotations"])]
    events.append(emit("response.output_text.done", **where, text=part["text"], logprobs=[]))
    events.append(emit("response.content_part.done", **where, part=part))
    events.append(emit("response.output_item.done", output_index=index, item=item))
    return events

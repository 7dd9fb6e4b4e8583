"""Stored responses (``store: true``) in the session store's database: the response as answered and its
input items. A response belongs to the principal that made it: others get the 404 of a missing one
(admins see every response, as they see every session)."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ragengine.conversations.models import ResponseRow
from ragengine.errors import BadRequest, NotFound
from ragengine.vectorstores.catalog import SqlStore

MAX_CHAIN = 200  # previous_response_id hops a follow-up replays


def missing(response_id: str, param: str | None = None) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param=param)


class ResponseStore(SqlStore):
    @staticmethod
    def _row(s: Session, response_id: str, owner: str | None, param: str | None = None) -> ResponseRow:
        """``owner`` None: any response (an admin)."""
        row = s.get(ResponseRow, response_id)
        if row is None or (owner is not None and row.owner != owner):
            raise missing(response_id, param)
        return row

    async def save(self, body: dict, items: list[dict], owner: str | None) -> None:
        def fn(s: Session) -> None:
            s.add(ResponseRow(id=body["id"], owner=owner, previous_response_id=body.get("previous_response_id"),
                              body=body, input_items={"items": items}))
        await self._run(fn)

    async def get(self, response_id: str, owner: str | None) -> tuple[dict, list[dict]]:
        def fn(s: Session) -> tuple[dict, list[dict]]:
            row = self._row(s, response_id, owner)
            return dict(row.body), list((row.input_items or {}).get("items", []))
        return await self._run(fn)

    async def delete(self, response_id: str, owner: str | None) -> None:
        def fn(s: Session) -> None:
            self._row(s, response_id, owner)
            s.execute(delete(ResponseRow).where(ResponseRow.id == response_id))
        await self._run(fn)

    async def history(self, response_id: str, owner: str | None) -> list[dict]:
        """The conversation up to and including ``response_id``: each response's input items, then its
        output messages, oldest first."""
        def fn(s: Session) -> list[dict]:
            turns: list[list[dict]] = []
            current: str | None = response_id
            while current is not None:
                if len(turns) >= MAX_CHAIN:
                    raise BadRequest(f"The chain of previous responses is longer than {MAX_CHAIN}.",
                                     param="previous_response_id")
                row = self._row(s, current, owner, "previous_response_id")
                outputs = [o for o in (row.body or {}).get("output", []) if o.get("type") == "message"]
                turns.append(list((row.input_items or {}).get("items", [])) + outputs)
                current = row.previous_response_id
            return [item for turn in reversed(turns) for item in turn]
        return await self._run(fn)

    async def exists(self, response_id: str) -> bool:
        def fn(s: Session) -> bool:
            return s.scalar(select(ResponseRow.id).where(ResponseRow.id == response_id)) is not None
        return await self._run(fn)

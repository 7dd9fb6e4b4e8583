"""What every part of the PostgreSQL store does with a connection: reach the psycopg driver under
SQLAlchemy (COPY, and DDL with names quoted by psycopg), and turn driver errors into the store's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from ragengine.stores.base import DocumentRace, StoreUnavailable, describe


def driver(conn: Connection) -> psycopg.Connection:
    """The psycopg connection under ``conn``, in its transaction."""
    raw = conn.connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    return raw


@contextlib.contextmanager
def store_errors() -> Iterator[None]:
    """A database that cannot serve is StoreUnavailable (503); races and key conflicts pass through."""
    try:
        yield
    except (StoreUnavailable, DocumentRace):
        raise
    except (IntegrityError, psycopg.errors.IntegrityError):
        raise
    except (SQLAlchemyError, psycopg.Error) as exc:  # psycopg's own: COPY and DDL run on the driver
        raise StoreUnavailable(describe(exc)) from exc

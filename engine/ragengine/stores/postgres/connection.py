"""What every part of the PostgreSQL store does with a connection: reach the psycopg driver under
SQLAlchemy (COPY, and DDL with names quoted by psycopg), and turn driver errors into the store's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DataError, IntegrityError, SQLAlchemyError

from ragengine.stores.base import DocumentRace, NoSuchIndex, StoreRefused, StoreUnavailable, describe


def driver(conn: Connection) -> psycopg.Connection:
    """The psycopg connection under ``conn``, in its transaction."""
    raw = conn.connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    return raw


@contextlib.contextmanager
def store_errors() -> Iterator[None]:
    """A database that cannot serve is StoreUnavailable (503); data it refuses is StoreRefused (the request's
    fault: a 422, and the store still serves); races, key conflicts and missing indexes pass through."""
    try:
        yield
    except (StoreUnavailable, StoreRefused, DocumentRace, NoSuchIndex):
        raise
    except (IntegrityError, psycopg.errors.IntegrityError):
        raise
    except (DataError, psycopg.DataError) as exc:  # SQLSTATE class 22: a NUL in text, a value out of range
        raise StoreRefused(describe(exc)) from exc
    except (SQLAlchemyError, psycopg.Error) as exc:  # psycopg's own: COPY and DDL run on the driver
        raise StoreUnavailable(describe(exc)) from exc

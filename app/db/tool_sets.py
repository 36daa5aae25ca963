"""Tool snapshots stored once per distinct set of schemas, named by their digest.

A session's tool snapshot (app/agent/opening/tool_snapshot.py) is the same bytes for every
session of a profile: about 6 KB for the built-in toolbox. Kept in each session row it
made the row overflow its page, so each of a turn's updates of the row (roll-up, counters,
lease) rewrote two overflow pages and the free list, three of a commit's sixteen pages;
and a million sessions held six gigabytes of copies. The row now holds a reference,
`sha256:<hex digest>`, and the bytes live once in `tool_set`. Rows written before hold
the JSON itself, and so does a snapshot shorter than its reference ("[]"): any value
that does not start with the prefix is the snapshot.

Readers get the JSON, never the reference: the store's reads resolve it, and an ORM load
of a session row resolves it through the `load` event below. Resolved snapshots are
memoised per process; a digest names the same bytes in every database, so the memo
needs no invalidation.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from collections import OrderedDict
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import QueryContext
from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel import Field, SQLModel

from app.db.models import SessionRow
from app.db.raw import Hot

PREFIX = "sha256:"
_REFERENCE_LEN = len(PREFIX) + 64
MEMO_LIMIT = 256
"""Distinct snapshots a process keeps resolved: one per profile and tool rebuild, so a
handful; the bound only guards against a configuration that churns them."""


def _now() -> float:
    return time.time()


class ToolSetRow(SQLModel, table=True):
    __tablename__ = "tool_set"

    digest: str = Field(primary_key=True)
    """`sha256:` and the hex digest of `specs`: what a session row holds instead."""
    specs: str
    created_at: float = Field(default_factory=_now)


_ADD = Hot(
    "INSERT INTO tool_set (digest, specs, created_at) VALUES (:d, :s, :now) "
    "ON CONFLICT (digest) DO NOTHING"
)
_GET = Hot("SELECT specs FROM tool_set WHERE digest = :d")
_NEWEST = Hot("SELECT digest, specs FROM tool_set ORDER BY created_at DESC LIMIT :n")

_memo: OrderedDict[str, str] = OrderedDict()
_memo_lock = threading.Lock()
"""The writer thread and the event loop both resolve."""
_stored: WeakKeyDictionary[Engine, set[str]] = WeakKeyDictionary()
"""Per database, the references known committed: one probe per set per process, not one
per session created."""


class MissingToolSet(LookupError):
    """A session row names a tool set its database does not hold."""


def _remember(reference: str, specs: str) -> None:
    with _memo_lock:
        _memo[reference] = specs
        _memo.move_to_end(reference)
        while len(_memo) > MEMO_LIMIT:
            _memo.popitem(last=False)


@functools.lru_cache(maxsize=MEMO_LIMIT)
def reference_for(specs: str) -> str:
    """What a session row stores for `specs`: the reference, or the JSON when shorter.
    Memoised: every new session hashed the same 6 KB again (its string's hash is kept)."""
    if len(specs) <= _REFERENCE_LEN:
        return specs
    return PREFIX + hashlib.sha256(specs.encode()).hexdigest()


def store_reference(conn: Connection, specs: str) -> tuple[str, bool]:
    """(what the row stores, whether this transaction may have added the set): the set
    is inserted unless it is known committed, and the caller passes the reference to
    `committed` once its transaction is (marked before, a rollback would leave later rows
    naming a set the database lacks)."""
    reference = reference_for(specs)
    if reference == specs:
        return specs, False
    _remember(reference, specs)
    if reference in _stored.get(conn.engine, ()):
        return reference, False
    _ADD.run(conn, {"d": reference, "s": specs, "now": time.time()})
    return reference, True


def committed(engine: Engine, reference: str) -> None:
    """The set `reference` names is committed in `engine`'s database."""
    _stored.setdefault(engine, set()).add(reference)


def preload(engine: Engine) -> None:
    """Resolve the database's sets before a read needs one: after a restart each session's
    first turn would read its set back otherwise, a statement on the turn's path. A
    handful of rows (one per profile and rebuild), newest last so they stay memoised."""
    with engine.connect() as conn:
        rows = _NEWEST.run(conn, {"n": MEMO_LIMIT}).fetchall()
    for reference, specs in reversed(rows):
        _remember(str(reference), str(specs))
    _stored.setdefault(engine, set()).update(str(reference) for reference, _ in rows)


def resolve(conn: Connection, value: str) -> str:
    """The snapshot a session row's stored value names."""
    if not value.startswith(PREFIX):
        return value
    with _memo_lock:
        found = _memo.get(value)
    if found is not None:
        return found
    row = _GET.run(conn, {"d": value}).fetchone()
    if row is None:
        raise MissingToolSet(f"no tool set {value} in the database")
    specs = str(row[0])
    _remember(value, specs)
    return specs


@event.listens_for(SessionRow, "load")
def _resolve_on_load(target: SessionRow, context: QueryContext) -> None:
    # An ORM read of a session hands out the snapshot like the store's reads do; set as
    # the loaded value, so a later flush of the row does not write the JSON back.
    stored: Any = target.__dict__.get("tool_snapshot")
    if isinstance(stored, str) and stored.startswith(PREFIX):
        specs = resolve(context.session.connection(), stored)
        set_committed_value(target, "tool_snapshot", specs)

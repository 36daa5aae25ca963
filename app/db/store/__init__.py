"""The store API: the only code that writes SQL. Every function takes keyword arguments.

`Store` is one object with one writer thread and one set of transactions
(`transactions.py`: the units, deferred writes and the lease fence every write on a
session's log goes through); its methods live in a module per section: `sessions`
(creation, rows, the turn lease), `messages` (a session's log), `turns`, `ledger` (the
usage ledger) and `search` (the full-text index). The values it takes and returns are in
`records.py`, its errors in `errors.py`.
"""

from app.db.store.errors import STORE_FAILURES, LeaseLost, PersistenceError
from app.db.store.ledger import UsageLedger
from app.db.store.messages import Messages
from app.db.store.records import ApiCallRecord, NewMessage, StoredMessage
from app.db.store.search import SearchIndex
from app.db.store.sessions import Sessions
from app.db.store.transactions import Carried
from app.db.store.turns import Turns


class Store(Sessions, Messages, Turns, UsageLedger, SearchIndex):
    """The store: each section's methods on one writer thread and one set of transactions."""


__all__ = [
    "STORE_FAILURES",
    "ApiCallRecord",
    "Carried",
    "LeaseLost",
    "NewMessage",
    "PersistenceError",
    "Store",
    "StoredMessage",
]

"""Each configured MCP server's last listing, kept across restarts.

Without it, a restart starts every server's toolbox empty until the server answers: a
session that opens meanwhile gets no MCP tools, then gets them back at its next turn, two
cache breaks for nothing; a server down at boot takes its tools away until it returns.
With it, the hub offers the stored listing at once (app/tools/mcp/hub.py), and a live
listing with the same digest changes nothing. A listing is keyed by the server's name and
the digest of its configuration (command, args, URL; never env or header values): a
changed command or URL makes the stored listing someone else's, and it is not used.

The table is on SQLModel's metadata, created by the engine like every other table (no
migration tool yet); the upsert is plain SQL both SQLite and PostgreSQL accept.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlmodel import Field, SQLModel

if TYPE_CHECKING:  # the engine imports this module for its table, and the store the engine
    from app.db.store import Store


def _now() -> float:
    return time.time()


class McpListingRow(SQLModel, table=True):
    __tablename__ = "mcp_listing"

    server: str = Field(primary_key=True)
    config_digest: str
    tools: str
    """The server's `tools/list` answer, every page, as JSON (the MCP wire's own shape)."""
    listed_at: float = Field(default_factory=_now)


_UPSERT = text(
    "INSERT INTO mcp_listing (server, config_digest, tools, listed_at) "
    "VALUES (:server, :digest, :tools, :now) "
    "ON CONFLICT (server) DO UPDATE SET config_digest = excluded.config_digest, "
    "tools = excluded.tools, listed_at = excluded.listed_at"
)
_ALL = text("SELECT server, config_digest, tools FROM mcp_listing")


def save_listing(store: Store, *, server: str, digest: str, tools: str) -> None:
    with store.begin() as conn:
        conn.execute(
            _UPSERT, {"server": server, "digest": digest, "tools": tools, "now": time.time()}
        )


def stored_listings(store: Store) -> dict[str, tuple[str, str]]:
    """server -> (config digest, tools JSON)."""
    with store.reader() as conn:
        return {row[0]: (row[1], row[2]) for row in conn.execute(_ALL)}

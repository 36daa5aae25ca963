"""Tables behind the drop-in chat path: the transcript index that lets a client without a
session id continue its conversation, and images stored once per session."""

from __future__ import annotations

import time

from sqlmodel import Field, SQLModel

from app.db.models import BIG


def _now() -> float:
    return time.time()


class TranscriptKeyRow(SQLModel, table=True):
    """One row per client-visible message of a session: the rolling hash of the visible
    transcript up to and including it. A request's own rolling hashes are looked up by
    this indexed key, so finding the conversation costs the same with 10 or 10 million
    sessions stored."""

    __tablename__ = "transcript_key"

    id: int | None = Field(default=None, primary_key=True, sa_type=BIG)
    prefix_hash: str = Field(index=True)
    session_id: str = Field(foreign_key="session.id", index=True)
    position: int
    """1-based index of the visible message this prefix ends with."""
    last_row_id: int = Field(sa_type=BIG)
    """The last message row (server-side tool rows included) that belongs to the prefix."""
    compactions: int = 0
    """The session's compaction count when written: a later compaction re-inserts rows, so
    row ids no longer order the log and a divergence cannot be retracted by id."""
    created_at: float = Field(default_factory=_now)


class SessionImageRow(SQLModel, table=True):
    __tablename__ = "session_image"

    session_id: str = Field(foreign_key="session.id", primary_key=True)
    sha256: str = Field(primary_key=True)
    media_type: str = ""
    data: str = ""
    """Base64 payload of a data URL, or empty when `url` is set."""
    url: str = ""
    created_at: float = Field(default_factory=_now)


class NamedChatRow(SQLModel, table=True):
    """An app's own id for a conversation (Open WebUI's chat id, sent in a session header)
    and the session it names, per key and end user: the same id sent by another key or
    another end user names nothing of this one's."""

    __tablename__ = "named_chat"

    owner: str = Field(primary_key=True)
    end_user: str = Field(primary_key=True)
    """"" for none, as in `session.end_user`."""
    name: str = Field(primary_key=True)
    session_id: str = Field(foreign_key="session.id", index=True)
    created_at: float = Field(default_factory=_now)

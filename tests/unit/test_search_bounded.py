"""search_sessions ranks a bounded set of the newest matches, on a real SQLite file.

The hostile cases: rows of another key or another end user inside the candidates' id
range (where the terms are matched without the scope's tag), retracted rows among the
candidates, and one chatty session holding every candidate of a round. And the oracle:
on stores small enough that every match is a candidate, the hits are exactly those of the
query that ranked every match (kept here as the reference).
"""

from __future__ import annotations

import random

import pytest
from sqlalchemy import text

from app.db import tool_store
from app.db.search_index import scope_tag
from app.db.store import NewMessage, Store
from app.db.tool_store import search_sessions
from tests.support.stores import BACKENDS, raw_sql

STORE_BACKENDS = BACKENDS
"""Every store test here runs on SQLite and on PostgreSQL."""

KEY = "fp-key"
OTHER = "fp-other"


def _open(store: Store, sid: str, owner: str, end_user: str = "") -> None:
    store.create_session(
        session_id=sid, owner=owner, end_user=end_user, profile="courier", system_prompt="p"
    )


def _say(store: Store, sid: str, *texts: str) -> list[int]:
    assert store.acquire_lease(session_id=sid, lease="L", ttl_s=60)
    ids = store.append_messages(
        session_id=sid, lease="L", turn_id=None, messages=[NewMessage("user", t) for t in texts]
    )
    store.release_lease(session_id=sid, lease="L")
    return ids


def _retract(store: Store, ids: list[int]) -> None:
    raw_sql(
        store,
        "UPDATE message SET active = FALSE, compacted = FALSE WHERE id = :i",
        [{"i": i} for i in ids],
    )


def _found(store: Store, **kwargs: object) -> list[tuple[str, int]]:
    params: dict[str, object] = {"owner": KEY, "end_user": None, "limit": 5} | kwargs
    hits = search_sessions(store, **params)  # type: ignore[arg-type]
    return [(h.session_id, h.message_id) for h in hits]


def test_other_scopes_rows_inside_the_candidates_range_never_surface(store: Store) -> None:
    """The key's matches and another key's (and another end user's) alternate, so the
    candidates' id range is dense and scored by the terms alone: what the range holds
    beyond the candidates must be dropped, not ranked."""
    for sid, owner, end_user in (("mine", KEY, ""), ("alice", KEY, "alice"), ("theirs", OTHER, "")):
        _open(store, sid, owner, end_user)
    mine, alices, theirs = [], [], []
    for n in range(30):
        # The other scopes' rows match better (the word twice in fewer words).
        theirs += _say(store, "theirs", "kiwi kiwi")
        alices += _say(store, "alice", "kiwi kiwi")
        mine += _say(store, "mine", f"kiwi and a much longer message number {n} to rank lower")
    assert _found(store, terms=["kiwi"], end_user="") == [("mine", mine[-1])]
    key_wide = _found(store, terms=["kiwi"])
    assert {sid for sid, _ in key_wide} == {"mine", "alice"}
    assert ("theirs", theirs[-1]) not in key_wide
    assert _found(store, terms=["kiwi"], end_user="alice") == [("alice", alices[-1])]
    assert _found(store, owner=OTHER, terms=["kiwi"], end_user="") == [("theirs", theirs[-1])]


def test_retracted_candidates_are_skipped_not_shown(store: Store) -> None:
    _open(store, "a", KEY)
    _open(store, "b", KEY)
    older = _say(store, "a", "mango once", "mango mango best")
    gone = _say(store, "b", "mango mango mango mango")
    newest = _say(store, "a", "mango mango mango mango mango")
    _retract(store, gone + newest)
    assert _found(store, terms=["mango"]) == [("a", older[1])]


def test_one_chatty_session_holding_a_whole_round_still_yields_others(store: Store) -> None:
    _open(store, "quiet-1", KEY)
    _open(store, "quiet-2", KEY)
    _open(store, "chatty", KEY)
    quiet = [_say(store, "quiet-1", "papaya here")[0], _say(store, "quiet-2", "papaya there")[0]]
    _say(store, "chatty", *[f"papaya {n}" for n in range(tool_store.CANDIDATES + 200)])
    found = dict(_found(store, terms=["papaya"]))
    assert set(found) == {"chatty", "quiet-1", "quiet-2"}
    assert [found["quiet-1"], found["quiet-2"]] == quiet


def test_only_the_newest_rounds_are_ranked(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `CANDIDATE_ROUNDS` rounds the older matches are not read: a session whose only
    match is older than that is not found (the tool's description says so)."""
    monkeypatch.setattr(tool_store, "CANDIDATES", 4)
    _open(store, "old", KEY)
    _open(store, "chatty", KEY)
    _say(store, "old", "guava")
    _say(store, "chatty", *["guava"] * (4 * tool_store.CANDIDATE_ROUNDS - 1))
    assert [sid for sid, _ in _found(store, terms=["guava"])] == ["chatty", "old"]
    _say(store, "chatty", "guava")  # now the rounds are full before reaching it
    assert [sid for sid, _ in _found(store, terms=["guava"])] == ["chatty"]


# --------------------------------------------------------------------------- the oracle

_RANK_EVERY_MATCH = text(
    "WITH matched AS ("
    " SELECT rowid AS id, bm25(message_fts, 1.0, 1.0, 0.0) AS score"
    " FROM message_fts WHERE message_fts MATCH :owned"
    "), hits AS ("
    " SELECT m.id AS id, m.session_id AS session_id, matched.score AS score"
    " FROM matched JOIN message m ON m.id = matched.id JOIN session s ON s.id = m.session_id"
    " WHERE s.owner = :owner AND (:any_user OR s.end_user = :end_user)"
    " AND (m.active = 1 OR m.compacted = 1)"
    " AND (:session_id IS NULL OR s.id = :session_id)"
    "), ranked AS ("
    " SELECT id, session_id, score, ROW_NUMBER() OVER ("
    "  PARTITION BY session_id ORDER BY score, id DESC) AS rn FROM hits"
    ") SELECT session_id, id FROM ranked WHERE rn = 1 ORDER BY score, id DESC LIMIT :limit"
)
"""The query before issue 30: every match of the scope ranked, best per session."""


def _every_match_ranked(
    store: Store,
    *,
    owner: str,
    end_user: str | None,
    terms: list[str],
    limit: int,
    any_term: bool = False,
    session_id: str | None = None,
) -> list[tuple[str, int]]:
    quoted = (" OR " if any_term else " ").join(f'"{t}"' for t in terms)
    tag = f'"{scope_tag(owner, end_user or "")}"' + (" *" if end_user is None else "")
    owned = f"owner_tag : {tag} AND {{content api_content}} : ({quoted})"
    store.searchable()  # what search_sessions does first: the newest rows are indexed
    with store.engine.connect() as conn:
        rows = conn.execute(
            _RANK_EVERY_MATCH,
            {
                "owned": owned,
                "owner": owner,
                "any_user": end_user is None,
                "end_user": end_user or "",
                "session_id": session_id,
                "limit": limit,
            },
        ).all()
    return [(str(r[0]), int(r[1])) for r in rows]


def _random_store(store: Store, *, seed: int, sparse_owner: str) -> None:
    """Three scopes of one key and another key, all dense, and `sparse_owner`'s few rows
    spread thin among them (its candidates' range then holds mostly others' rows)."""
    rng = random.Random(seed)
    words = ["fig", "lime", "plum", "pear", "date", "kiwi", "yuzu", "sloe"]
    scopes = [(KEY, ""), (KEY, "alice"), (KEY, "bob"), (OTHER, "")]
    sessions = []
    for n in range(12):
        owner, end_user = scopes[n % len(scopes)]
        _open(store, f"s{n}", owner, end_user)
        sessions.append(f"s{n}")
    _open(store, "sparse", sparse_owner)
    said: list[int] = []
    for n in range(240):
        text_ = " ".join(rng.choices(words, k=rng.randint(1, 9)))
        said += _say(store, "sparse" if n % 40 == 0 else rng.choice(sessions), text_)
    _retract(store, rng.sample(said, 20))


@pytest.mark.sqlite_only  # the reference ranking is FTS5's bm25 over every match
@pytest.mark.parametrize(("seed", "exact_tags"), [(1, 16), (2, 16), (3, 16), (1, 2), (2, 3)])
def test_same_hits_as_ranking_every_match(
    store: Store, monkeypatch: pytest.MonkeyPatch, seed: int, exact_tags: int
) -> None:
    """`exact_tags` below the key's three end users ("", alice, bob) sends its key-wide
    searches to the prefix form of the tag."""
    monkeypatch.setattr(tool_store, "MAX_EXACT_TAGS", exact_tags)
    _random_store(store, seed=seed, sparse_owner="fp-sparse")
    cases: list[dict[str, object]] = []
    for owner, end_user in ((KEY, None), (KEY, ""), (KEY, "alice"), (OTHER, ""), ("fp-sparse", "")):
        for terms in (["fig"], ["kiwi", "plum"], ["sloe", "yuzu", "date"]):
            for any_term in (False, True):
                for limit in (1, 3, 20):
                    cases.append(
                        {
                            "owner": owner,
                            "end_user": end_user,
                            "terms": terms,
                            "limit": limit,
                            "any_term": any_term,
                        }
                    )
    cases.append({"owner": KEY, "end_user": None, "terms": ["fig"], "limit": 5, "session_id": "s4"})
    cases.append({"owner": "fp-nobody", "end_user": None, "terms": ["fig"], "limit": 5})
    for case in cases:
        expected = _every_match_ranked(store, **case)  # type: ignore[arg-type]
        hits = search_sessions(store, **case)  # type: ignore[arg-type]
        assert [(h.session_id, h.message_id) for h in hits] == expected, case

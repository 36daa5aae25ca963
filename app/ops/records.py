"""`courier sessions ...`, `courier usage`, `courier keys hash`: the store read directly.

They read the database file, not the HTTP API, so they work while the server is down (and
with no key at hand), and see what the API may hide: every owner, archived and retracted
rows. The file is opened read-only.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

from app.db.operator_store import OperatorStore, SessionSummary, StoreMissing, UnknownSession
from app.security.auth import fingerprint


def data_dir(explicit: str | None) -> Path:
    """--data-dir, else COURIER_DATA_DIR, else the configured one, else ./data."""
    if explicit:
        return Path(explicit)
    if env := os.environ.get("COURIER_DATA_DIR"):
        return Path(env)
    from app.config import ConfigError, load_settings

    try:
        return load_settings().data_dir
    except ConfigError:
        return Path("./data")


def _open(args: argparse.Namespace) -> OperatorStore:
    return OperatorStore(data_dir(args.data_dir) / "courier.db")


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))


def _usd(amount: Decimal) -> str:
    return f"${amount:.4f}"


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def _summary_json(s: SessionSummary) -> dict[str, Any]:
    d = asdict(s)
    d["cost_usd"] = str(s.cost_usd)
    return d


def sessions_list(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    store = _open(args)
    try:
        found = store.sessions(limit=args.limit, owner=args.owner, after=args.after)
    except UnknownSession:
        print(f"courier: no session {args.after} to list after", file=sys.stderr)
        return 1
    finally:
        store.close()
    if args.json:
        json.dump([_summary_json(s) for s in found], out, indent=2)
        out.write("\n")
        return 0
    if not found:
        out.write("no sessions\n")
        return 0
    rows = [["SESSION", "PROFILE", "STARTED (UTC)", "TURNS", "COST", "TITLE"]]
    rows += [
        [
            s.id,
            s.profile,
            _when(s.started_at),
            str(s.turns),
            _usd(s.cost_usd) + ("+?" if s.cost_unknown_calls else ""),
            s.title[:40],
        ]
        for s in found
    ]
    _table(rows, out)
    if len(found) == args.limit:
        out.write(f"(older: --after {found[-1].id})\n")
    return 0


def _load_session(
    args: argparse.Namespace,
) -> tuple[SessionSummary, list[dict[str, Any]]] | None:
    """The session record and its message rows, or None (said on stderr) if there is none."""
    store = _open(args)
    try:
        summary = store.session(args.session_id)
        messages = store.messages(args.session_id) if summary else []
    finally:
        store.close()
    if summary is None:
        print(f"courier: no session {args.session_id}", file=sys.stderr)
        return None
    return summary, messages


def sessions_show(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    loaded = _load_session(args)
    if loaded is None:
        return 1
    summary, messages = loaded
    if args.json:
        json.dump({"session": _summary_json(summary), "messages": messages}, out, indent=2)
        out.write("\n")
        return 0
    out.write(
        f"session {summary.id}  profile {summary.profile}  owner {summary.owner}\n"
        f"started {_when(summary.started_at)}  last active {_when(summary.last_active_at)}  "
        f"turns {summary.turns}  cost {_usd(summary.cost_usd)}\n"
        f"tokens: input {summary.input_tokens}, output {summary.output_tokens}, "
        f"cache read {summary.cache_read_tokens}, cache write {summary.cache_write_tokens}\n\n"
    )
    for m in messages:
        mark = "" if m["state"] == "live" else f" [{m['state']}]"
        head = f"#{m['id']} {m['role']}{mark}"
        if m["tool_calls"]:
            calls = json.loads(m["tool_calls"])
            names = ", ".join(
                c.get("name") or c.get("function", {}).get("name", "?") for c in calls
            )
            head += f" -> calls {names}"
        if m["tool_name"]:
            head += f" ({m['tool_name']}{', error' if m['is_error'] else ''})"
        out.write(head + "\n")
        if m["content"]:
            out.write("  " + m["content"].replace("\n", "\n  ") + "\n")
    return 0


def sessions_search(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    store = _open(args)
    try:
        hits = store.search(args.query, limit=args.limit)
    finally:
        store.close()
    if args.json:
        json.dump(hits, out, indent=2)
        out.write("\n")
    elif not hits:
        out.write("no matches\n")
    else:
        for h in hits:
            mark = "" if h["state"] == "live" else f" [{h['state']}]"
            out.write(f"{h['session_id']}  #{h['message_id']} {h['role']}{mark}: {h['snippet']}\n")
    return 0


def sessions_export(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """JSON Lines: the session record first, then every message row in log order."""
    out = out or sys.stdout
    loaded = _load_session(args)
    if loaded is None:
        return 1
    summary, messages = loaded
    out.write(json.dumps({"type": "session", **_summary_json(summary)}) + "\n")
    for m in messages:
        out.write(json.dumps({"type": "message", **m}, ensure_ascii=False) + "\n")
    return 0


def usage(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    since = time.time() - args.days * 86400 if args.days else None
    store = _open(args)
    try:
        rows = store.usage(since=since)
    finally:
        store.close()
    if args.json:
        payload = [{**asdict(r), "cost_usd": str(r.cost_usd)} for r in rows]
        json.dump(payload, out, indent=2)
        out.write("\n")
        return 0
    if not rows:
        out.write("no upstream calls recorded\n")
        return 0
    table = [["DAY (UTC)", "KEY", "PROFILE", "CALLS", "INPUT", "OUTPUT", "CACHE READ", "COST"]]
    for r in rows:
        cost = _usd(r.cost_usd) + (f" +{r.unknown_calls} unpriced" if r.unknown_calls else "")
        table.append(
            [r.day, r.owner, r.profile, str(r.calls), str(r.input_tokens),
             str(r.output_tokens), str(r.cache_read_tokens), cost]
        )  # fmt: skip
    total = sum((r.cost_usd for r in rows), Decimal(0))
    table.append(["total", "", "", str(sum(r.calls for r in rows)), "", "", "", _usd(total)])
    _table(table, out)
    return 0


def keys_hash(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Read a key from stdin (never argv, which `ps` shows) and print its digests."""
    out = out or sys.stdout
    key = getpass.getpass("key: ") if sys.stdin.isatty() else sys.stdin.readline().strip()
    if not key:
        print("courier: no key on stdin", file=sys.stderr)
        return 2
    digest = hashlib.sha256(key.encode()).hexdigest()
    out.write(f'key_sha256 = "{digest}"\n')
    out.write(
        f"# for a [[keys]] entry in the TOML config; owner id in the store: {fingerprint(key)}\n"
    )
    return 0


def store_missing(exc: StoreMissing) -> int:
    print(f"courier: {exc}", file=sys.stderr)
    return 1

"""One long session driven to about 5x the context window, with and without calibration.

A small window (16,000 tokens, 1,000 reserved for output) and a simulator that refuses any
prompt larger than it, so a missed compaction is a real overflow. The workload is mostly
Japanese and Chinese (file reads and pasted text) with ASCII log reads mixed in: Courier's
rough estimate counts one token per CJK code point while the simulator bills
ceil(utf-8 bytes / 4), about 0.75 per CJK character, so the raw estimate runs high; the
calibrated trigger re-anchors it to billed usage. The same turns run twice through a fresh
server, once with the calibrated trigger (the default) and once with
`COURIER_CALIBRATED_TRIGGER=false`.

The simulator runs its demo policy (no script): a user message naming a file gets a
`read_file` call, a tool result gets a prose answer, and a compaction summary request (no
tools) gets an echo of its prompt, so summary calls never consume or break a script. They
are told apart by the summariser's system prompt in the recorded requests.

Cost is the ledger's `cost_usd` summed (claude-sonnet-4-5 at genai-prices rates, Anthropic
wire with cache markers, input and output). The demo policy's summaries are short echoes
(about 70 tokens), so summary output cost and the post-compaction prompt are lower than with
a real summariser. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/long_session.py [--multiple 5] [--keep]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from _harness import bench_key, free_port, start_server, start_simulator, stop, wait_http

from app.agent.context.compressor import SUMMARISER_SYSTEM, rough_tokens, threshold_tokens
from app.config import Profile
from app.providers.pricing import prices_version
from app.simulator import anthropic_wire
from app.simulator.token_count import count_tokens

MODEL = "claude-sonnet-4-5"
PROVIDER = "anthropic"
WINDOW = 16_000
MAX_OUTPUT = 1_000
FALLBACK_MARK = "earlier messages were removed without a model summary"
READ_LINE_OVERHEAD = 8
"""Chars `read_file` adds per line (line number, tab, newline)."""

_JA = (
    "本日の会議では新しい配送システムの設計について議論しました。",
    "倉庫の在庫データは毎晩自動的に同期され、翌朝までに集計が完了します。",
    "障害が発生した場合は、担当者が三十分以内に原因を調査して報告します。",
    "顧客からの問い合わせは優先度に応じて三つの窓口に振り分けられます。",
    "この変更により、注文処理の平均時間は約二割短縮される見込みです。",
    "来月からは東京と大阪の拠点で同じ手順を試験的に運用します。",
    "請求書の形式は取引先ごとに異なるため、変換規則を一覧にまとめました。",
    "夜間のバッチ処理が遅れると、朝の出荷予定に影響が出る恐れがあります。",
    "検証環境では本番と同じ設定を使い、差分があれば必ず記録してください。",
    "利用者の権限は部署と役職によって決まり、四半期ごとに見直されます。",
)
_ZH = (
    "我们在本季度完成了数据迁移工作，旧系统将在下个月正式下线。",
    "每个仓库的库存记录都会在凌晨两点进行一次完整的核对。",
    "如果接口响应时间超过五秒，监控系统会自动发出告警通知。",
    "客户投诉的主要原因是配送延迟以及包裹信息更新不及时。",
    "新版本的结算模块支持多种货币，并且能够自动计算汇率差异。",
    "测试团队发现了三个严重问题，需要在发布之前全部修复。",
    "为了降低成本，我们计划把部分计算任务迁移到夜间执行。",
    "所有配置文件都必须经过审核，任何修改都要记录变更原因。",
    "系统日志保留九十天，超过期限的数据会被压缩后归档存储。",
    "下一阶段的重点是提高订单处理的稳定性和可追踪性。",
)
_LOG_WORDS = (
    "worker", "shard", "queue", "retry", "timeout", "commit", "snapshot", "ledger", "batch",
    "cursor", "lease", "region", "replica", "index", "flush", "backoff", "checkpoint",
)  # fmt: skip


# ------------------------------------------------------------------------------ workload


def _cjk_file(pool: tuple[str, ...], rng: random.Random, lines: int) -> str:
    return "\n".join("".join(rng.choice(pool) for _ in range(3)) for _ in range(lines)) + "\n"


def _log_file(rng: random.Random, lines: int) -> str:
    out = []
    for n in range(lines):
        words = " ".join(rng.choice(_LOG_WORDS) for _ in range(8))
        level = rng.choice(("INFO", "INFO", "WARN", "ERROR"))
        out.append(f"2026-11-30T10:{n % 60:02d}:{rng.randint(0, 59):02d}Z {level} {words}")
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class Turn:
    kind: str
    """ja-read | zh-paste | zh-read | ascii-read"""
    user: str
    tool_text: str
    """What the tool returns (approximately: the file plus read_file's line numbers)."""

    @property
    def billed(self) -> int:
        return count_tokens(self.user) + count_tokens(self.tool_text)

    @property
    def rough(self) -> int:
        return rough_tokens(self.user) + rough_tokens(self.tool_text)


def _with_line_numbers(text: str) -> str:
    return "".join(" " * READ_LINE_OVERHEAD + line for line in text.splitlines(keepends=True))


def _turns(workspace: Path, multiple: float) -> list[Turn]:
    """Turns until the content they add reaches `multiple` x the window (simulator tokens).

    Answers are short and the same for both runs, so they are left out of the total."""
    (workspace / "notes").mkdir(parents=True)
    (workspace / "logs").mkdir()
    turns: list[Turn] = []
    total = 0
    n = 0
    while total < multiple * WINDOW:
        n += 1
        rng = random.Random(n)
        kind = ("ja-read", "zh-paste", "zh-read", "ascii-read")[(n - 1) % 4]
        if kind == "ja-read":
            path = f"notes/ja_{n:03d}.md"
            text = _cjk_file(_JA, rng, 18)
            user = f"第{n}回: 次の資料を読んで要点を教えてください。 {path} "
        elif kind == "zh-read":
            path = f"notes/zh_{n:03d}.md"
            text = _cjk_file(_ZH, rng, 18)
            user = f"第{n}步：请阅读 {path} 并总结其中的风险。"
        elif kind == "ascii-read":
            path = f"logs/run_{n:03d}.log"
            text = _log_file(rng, 45)
            user = f"step {n}: open {path} and explain what went wrong in that run."
        else:
            path, text = "", ""
            pasted = "".join(rng.choice(_ZH) for _ in range(24))
            user = f"第{n}步：以下是今天的会议记录，请记住其中的决定。\n{pasted}"
        if path:
            (workspace / path).write_text(text, encoding="utf-8")
        turn = Turn(kind, user, _with_line_numbers(text))
        turns.append(turn)
        total += turn.billed
    return turns


# ------------------------------------------------------------------------------ one run


@dataclass
class Result:
    label: str
    turns: int = 0
    failed_turns: list[str] = field(default_factory=list)
    compactions: int = 0
    summary_rows: int = 0
    fallback_summaries: int = 0
    model_summary_calls: int = 0
    upstream_calls: int = 0
    prompt_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output_tokens: int = 0
    cost: Decimal | None = Decimal(0)
    summary_cost: Decimal | None = Decimal(0)
    peak_prompt: int = 0
    overflow_errors: int = 0
    other_errors: int = 0
    strikes: int = 0
    fallback_streak: int = 0
    prompts_before_compaction: list[int] = field(default_factory=list)
    prompts_after_compaction: list[int] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    log_path: Path | None = None
    notes: list[str] = field(default_factory=list)
    elapsed: float = 0.0


def _is_summary_request(body: dict[str, Any]) -> bool:
    system = body.get("system") or ""
    if isinstance(system, list):
        system = "".join(b.get("text", "") for b in system if isinstance(b, dict))
    return str(system).startswith(SUMMARISER_SYSTEM[:40])


def _read_db(db: Path, sid: str) -> tuple[tuple[int, int, int], list[str], list[tuple[Any, ...]]]:
    """The session's breaker state, its summary rows and its ledger (in call order)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        state = con.execute(
            "SELECT compactions, compaction_strikes, fallback_streak FROM session WHERE id = ?",
            (sid,),
        ).fetchone()
        summaries = con.execute(
            "SELECT content FROM message WHERE session_id = ? AND kind = 'summary'", (sid,)
        ).fetchall()
        calls = con.execute(
            "SELECT input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, "
            "cost_usd, outcome FROM api_call WHERE session_id = ? ORDER BY id",
            (sid,),
        ).fetchall()
    finally:
        con.close()
    return tuple(state), [text for (text,) in summaries], calls


def _tally(result: Result, db: Path, sid: str, bodies: list[dict[str, Any]]) -> None:
    state, summaries, calls = _read_db(db, sid)
    result.compactions, result.strikes, result.fallback_streak = state
    # Every compaction commit inserts exactly one summary row (later ones archive it).
    result.summary_rows = len(summaries)
    result.fallback_summaries = sum(1 for text in summaries if FALLBACK_MARK in text)
    result.upstream_calls = len(calls)
    summary_flags = [_is_summary_request(b) for b in bodies]
    result.model_summary_calls = sum(summary_flags)
    # The ledger and the simulator's log are the same calls in the same order.
    aligned = len(calls) == len(bodies)
    if not aligned:
        result.notes.append(f"{len(calls)} ledger rows for {len(bodies)} requests")
        result.summary_cost = None
    if result.summary_rows != result.compactions:
        result.notes.append(
            f"{result.summary_rows} summary rows for {result.compactions} compactions"
        )
    for index, (fresh, read, write, output, cost, outcome) in enumerate(calls):
        prompt = fresh + read + write
        result.prompt_tokens += prompt
        result.cache_read += read
        result.cache_write += write
        result.output_tokens += output
        result.peak_prompt = max(result.peak_prompt, prompt)
        amount = None if cost is None else Decimal(cost)
        if amount is None or result.cost is None:
            result.cost = None
        else:
            result.cost += amount
        if aligned and summary_flags[index]:
            if amount is None or result.summary_cost is None:
                result.summary_cost = None
            else:
                result.summary_cost += amount
        if outcome == "context_overflow":
            result.overflow_errors += 1
        elif outcome != "ok":
            result.other_errors += 1
    # Prompt size (simulator count) of the last agent request before each summary call and
    # of the first one after it: where compaction fired and where it landed.
    sizes = [anthropic_wire.parse(b).prompt_tokens for b in bodies]
    for index, is_summary in enumerate(summary_flags):
        if not is_summary:
            continue
        before = [sizes[i] for i in range(index) if not summary_flags[i]]
        after = [sizes[i] for i in range(index + 1, len(bodies)) if not summary_flags[i]]
        if before:
            result.prompts_before_compaction.append(before[-1])
        if after:
            result.prompts_after_compaction.append(after[0])


def _run(label: str, calibrated: bool, sim_url: str, workspace: Path, turns: list[Turn]) -> Result:
    result = Result(label)
    started = time.monotonic()
    with httpx.Client(timeout=30) as sim:
        sim.post(f"{sim_url}/_sim/reset", json={}).raise_for_status()
        sim.post(f"{sim_url}/_sim/config", json={"context_window": WINDOW}).raise_for_status()
    port, key = free_port(), bench_key()
    data = Path(tempfile.mkdtemp(prefix=f"courier-long-{label}-"))
    env = {
        "COURIER_API_KEY": key,
        "COURIER_PORT": str(port),
        "COURIER_DATA_DIR": str(data),
        "COURIER_UPSTREAM_PROVIDER": PROVIDER,
        "COURIER_UPSTREAM_BASE_URL": sim_url,
        "COURIER_UPSTREAM_API_KEY": "bench",
        "COURIER_UPSTREAM_MODEL": MODEL,
        "COURIER_CONTEXT_WINDOW": str(WINDOW),
        "COURIER_MAX_OUTPUT_TOKENS": str(MAX_OUTPUT),
        "COURIER_CALIBRATED_TRIGGER": "true" if calibrated else "false",
        "COURIER_WORKSPACE": str(workspace),
        "COURIER_UPSTREAM_RETRY_BASE_DELAY_S": "0",
        "COURIER_LOG_LEVEL": "info",
    }
    log = data / "server.log"
    result.log_path = log
    server = start_server(env, inherit_courier_env=False, log=log)
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {key}"}
    sid: str | None = None
    try:
        wait_http(f"{base}/health")
        with httpx.Client(timeout=120) as client:
            for n, turn in enumerate(turns, start=1):
                headers = {**auth, **({"X-Session-Id": sid} if sid else {})}
                body = {"model": "courier", "messages": [{"role": "user", "content": turn.user}]}
                resp = client.post(f"{base}/v1/chat/completions", json=body, headers=headers)
                result.turns += 1
                if resp.status_code != 200:
                    result.failed_turns.append(f"turn {n} ({turn.kind}): HTTP {resp.status_code}")
                sid = resp.headers.get("x-session-id", sid)
            recorded = client.get(f"{sim_url}/_sim/requests", params={"path": "/v1/messages"})
            recorded.raise_for_status()
            bodies = [json.loads(r["body"]) for r in recorded.json()]
    finally:
        stop(server)
    if sid is not None:
        _tally(result, data / "courier.db", sid, bodies)
    result.log_lines = [
        line.rstrip()
        for line in log.read_text(errors="replace").splitlines()
        if "app.agent.context.compressor" in line or "overflow" in line.lower()
    ]
    result.elapsed = time.monotonic() - started
    return result


# ------------------------------------------------------------------------------ report


def _usd(amount: Decimal | None) -> str:
    return "unknown" if amount is None else f"${amount:,.4f}"


def _ratio(a: float | Decimal | None, b: float | Decimal | None) -> str:
    if a is None or b is None:
        return "n/a"
    if b == 0:
        return "n/a (0 baseline)" if a else "1.00 (both 0)"
    return f"{float(a) / float(b):.2f}"


def _mean(values: list[int]) -> str:
    return f"{sum(values) / len(values):,.0f}" if values else "-"


def _cell(value: Any, money: bool) -> str:
    if money:
        return _usd(value)
    return f"{value:,}" if isinstance(value, int) else str(value)


def _report(turns: list[Turn], results: list[Result], threshold: int, keep: bool) -> None:
    billed = sum(t.billed for t in turns)
    rough = sum(t.rough for t in turns)
    cjk = sum(1 for t in turns if t.kind != "ascii-read")
    print(
        f"long session: {len(turns)} turns ({cjk} CJK-heavy, {len(turns) - cjk} ASCII), "
        f"{MODEL} (Anthropic wire), demo policy"
    )
    print(
        f"window {WINDOW:,}, max output {MAX_OUTPUT:,}, compaction threshold {threshold:,}; "
        f"simulator refuses prompts over {WINDOW:,}"
    )
    print(
        f"content sent: {billed:,} billed tokens = {billed / WINDOW:.1f}x the window "
        f"(rough estimate {rough:,} = {rough / billed:.2f}x billed); prices {prices_version()}"
    )
    print()
    cal, unc = results
    metrics: list[tuple[str, Any, Any, bool]] = [
        ("turns", cal.turns, unc.turns, False),
        ("failed turns", len(cal.failed_turns), len(unc.failed_turns), False),
        ("compactions", cal.compactions, unc.compactions, True),
        ("model summary calls", cal.model_summary_calls, unc.model_summary_calls, True),
        ("fallback summaries", cal.fallback_summaries, unc.fallback_summaries, False),
        ("upstream calls", cal.upstream_calls, unc.upstream_calls, True),
        ("prompt tokens billed", cal.prompt_tokens, unc.prompt_tokens, True),
        ("  cache read", cal.cache_read, unc.cache_read, True),
        ("  cache write", cal.cache_write, unc.cache_write, True),
        ("output tokens", cal.output_tokens, unc.output_tokens, True),
        ("total cost", cal.cost, unc.cost, True),
        ("  of which summary calls", cal.summary_cost, unc.summary_cost, True),
        ("peak prompt", cal.peak_prompt, unc.peak_prompt, False),
        ("mean prompt when compaction fired", _mean(cal.prompts_before_compaction),
         _mean(unc.prompts_before_compaction), False),
        ("mean prompt right after", _mean(cal.prompts_after_compaction),
         _mean(unc.prompts_after_compaction), False),
        ("overflow errors", cal.overflow_errors, unc.overflow_errors, False),
        ("other upstream errors", cal.other_errors, unc.other_errors, False),
        ("breaker strikes / fallback streak", f"{cal.strikes} / {cal.fallback_streak}",
         f"{unc.strikes} / {unc.fallback_streak}", False),
    ]  # fmt: skip
    header = f"{'':<36}{'calibrated':>13}{'uncalibrated':>15}{'unc/cal':>10}"
    print(header)
    print("-" * len(header))
    for name, a, b, with_ratio in metrics:
        money = name.strip() in ("total cost", "of which summary calls")
        ratio = _ratio(b, a) if with_ratio else ""
        print(f"{name:<36}{_cell(a, money):>13}{_cell(b, money):>15}{ratio:>10}")
    print()
    print(
        f"uncalibrated / calibrated: compactions {_ratio(unc.compactions, cal.compactions)}, "
        f"cost {_ratio(unc.cost, cal.cost)}"
    )
    for result in results:
        for problem in [*result.notes, *result.failed_turns[:5]]:
            print(f"[{result.label}] {problem}")
        warnings = [line for line in result.log_lines if " INFO " not in line]
        if warnings:
            print(f"[{result.label}] compressor warnings ({len(warnings)}), first 5:")
            for line in warnings[:5]:
                print(f"  {line}")
        if keep:
            print(f"[{result.label}] server log kept: {result.log_path}")
    total = sum(r.elapsed for r in results)
    print(f"(wall time {total:.1f} s)")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiple", type=float, default=5.0, help="content / window")
    parser.add_argument("--keep", action="store_true", help="keep data dirs and server logs")
    args = parser.parse_args()
    workspace = Path(tempfile.mkdtemp(prefix="courier-long-ws-"))
    turns = _turns(workspace, args.multiple)
    sim_port = free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    sim = start_simulator(sim_port)
    results: list[Result] = []
    try:
        wait_http(f"{sim_url}/v1/models")
        results.append(_run("calibrated", True, sim_url, workspace, turns))
        results.append(_run("uncalibrated", False, sim_url, workspace, turns))
    finally:
        stop(sim)
        shutil.rmtree(workspace, ignore_errors=True)
        if not args.keep:
            for result in results:
                if result.log_path is not None:
                    shutil.rmtree(result.log_path.parent, ignore_errors=True)
    threshold = threshold_tokens(Profile(context_window=WINDOW, max_output_tokens=MAX_OUTPUT))
    _report(turns, results, threshold, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())

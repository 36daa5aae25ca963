"""The most the next upstream call can cost, so a hard cap stops a run BEFORE the call that
would pass it rather than after (a soft cap, `budget.py`, only looks at billed figures).

The prompt is bounded by its bytes: byte-level BPE tokens each cover at least one byte, so
the UTF-8 size of everything sent (system prompt, tool schemas, messages, as JSON: escapes
only add bytes) plus a per-message and per-request allowance is at least its token count.
`TOKENS_PER_BYTE` is the escape hatch should a tokenizer ever break that. The output is
bounded by the `max_tokens` the request carries: under a hard cap Courier always sends one.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from app.providers.base import ModelRequest
from app.providers.pricing import PriceOverride, price_usage
from app.providers.usage import Usage

TOKENS_PER_BYTE = 1.0
"""Tokens per byte of prompt the bound assumes at most (1.0 for byte-level BPE)."""
PER_MESSAGE_TOKENS = 16
"""Each message's role and framing tokens, which its content bytes do not show."""
PER_REQUEST_TOKENS = 1024
"""The provider's own framing of a request (tool-use preamble, formatting)."""
MIN_OUTPUT_TOKENS = 256
"""Below this, a clamped call could not say anything useful: the cap refuses it instead."""


@dataclass(frozen=True, slots=True)
class CallBound:
    prompt_tokens: int
    output_tokens: int


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def prompt_bound(request: ModelRequest, *, tokens_per_byte: float = TOKENS_PER_BYTE) -> int:
    """An upper bound on the prompt tokens `request` is billed for (see the module doc)."""
    sent = [_plain(request.system), _plain(request.messages), _plain(request.tools)]
    size = len(json.dumps(sent, ensure_ascii=False, default=str).encode())
    framing = PER_MESSAGE_TOKENS * (len(request.messages) + len(request.system))
    return math.ceil(size * tokens_per_byte) + framing + PER_REQUEST_TOKENS


def call_cost(
    bound: CallBound, *, model: str, provider: str | None, override: PriceOverride | None
) -> Decimal | None:
    """The bound priced by the ledger's own pricer, the prompt taken as fresh input and as
    cache writes (whichever costs more); None when the fresh-input price is unknown. A
    model with no cache write rate (OpenAI's: caching there bills no writes) is priced by
    its fresh input alone: counting it unknown would refuse every such model a hard cap."""
    fresh, writes = (
        price_usage(usage, model=model, provider=provider, override=override).amount
        for usage in (
            Usage(input_tokens=bound.prompt_tokens, output_tokens=bound.output_tokens),
            Usage(cache_write_tokens=bound.prompt_tokens, output_tokens=bound.output_tokens),
        )
    )
    if fresh is None:
        return None
    return fresh if writes is None else max(fresh, writes)


def affordable_output(
    price: Callable[[int], Decimal | None], headroom: Decimal, *, most: int
) -> int:
    """The largest output token count in [0, most] whose call `price` keeps within
    `headroom` (-1 when not even the prompt fits). Searched, not solved: long-context tiers
    make the price stepwise, and the search is a dozen pricings beside a network call."""
    low, high = -1, most
    while low < high:
        mid = (low + high + 1) // 2
        cost = price(mid)
        if cost is not None and cost <= headroom:
            low = mid
        else:
            high = mid - 1
    return low

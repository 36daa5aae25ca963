"""Several upstream keys behind one profile: rotate past a throttled or refused key.

A profile with one key fails a turn when that key is rate-limited or revoked; with a ring,
the failing key cools down (the upstream's Retry-After when it sent one) and the same
request goes to the next key at once, before any output, so nothing is duplicated. Cool-
downs live in a store the caller provides, so a restart does not hammer a revoked key again.
Keys are known by a fingerprint only: the secret never leaves the adapter that sends it.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from app.providers.base import ModelRequest, Provider, ProviderError, ProviderEvent

log = logging.getLogger(__name__)

AUTH_COOLDOWN_FACTOR = 10.0
"""A refused key stays out much longer than a throttled one: waiting rarely fixes it."""


def fingerprint(key: str) -> str:
    """A stable, non-reversible name for a key (logs, the key-state table)."""
    return "key_" + hashlib.sha256(key.encode()).hexdigest()[:12]


class KeyStates(Protocol):
    """Where cool-downs are kept (the database, so they outlive the process)."""

    def cooling(self, profile: str) -> dict[str, float]:
        """Key fingerprint -> wall-clock time its cool-down ends, for the profile's keys."""
        ...

    def cool(self, profile: str, key_id: str, *, until: float, reason: str) -> None: ...


class RotatingProvider:
    """A `Provider` over one adapter per key, tried in order, cooling keys skipped."""

    def __init__(
        self,
        profile: str,
        keyed: Sequence[tuple[str, Provider]],
        states: KeyStates,
        *,
        cooldown_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not keyed:
            raise ValueError("a key ring needs at least one key")
        self.profile = profile
        self.keyed = list(keyed)
        self.states = states
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.passthrough = keyed[0][1].passthrough
        self.prefill = keyed[0][1].prefill

    def order(self) -> list[tuple[str, Provider]]:
        """Ready keys in configured order, then cooling ones by how soon they are back."""
        now = self.clock()
        cooling = self.states.cooling(self.profile)
        ready = [kp for kp in self.keyed if cooling.get(kp[0], 0.0) <= now]
        waiting = sorted(
            (kp for kp in self.keyed if cooling.get(kp[0], 0.0) > now),
            key=lambda kp: cooling[kp[0]],
        )
        return ready + waiting

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        candidates = self.order()
        for position, (key_id, provider) in enumerate(candidates):
            yielded = False
            stream = provider.stream(request)
            try:
                async for event in stream:
                    yielded = True
                    yield event
                return
            except ProviderError as error:
                last = position == len(candidates) - 1
                if yielded or not error.should_rotate:
                    raise
                factor = AUTH_COOLDOWN_FACTOR if error.kind == "auth" else 1.0
                wait = max(self.cooldown_s * factor, error.retry_after or 0.0)
                self.states.cool(self.profile, key_id, until=self.clock() + wait, reason=error.kind)
                if last:
                    raise
                log.warning(
                    "profile %s: key %s failed (%s); rotating to the next key",
                    self.profile,
                    key_id,
                    error.kind,
                )
            finally:
                # Release this key's connection before the next key is tried (or on cancel).
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()

    async def aclose(self) -> None:
        for _key_id, provider in self.keyed:
            await provider.aclose()

"""Runtime settings of the simulator, changeable over `POST /_sim/config`."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


class ConfigError(ValueError):
    """A settings update named an unknown field or carried a value of the wrong type."""


@dataclass(frozen=True, slots=True)
class SimulatorConfig:
    ttft_ms: float = 0.0
    """Delay before the first token-bearing frame (or before a non-streamed body)."""
    tokens_per_second: float = 0.0
    """Output pacing; 0 means unlimited so tests never wait on it."""
    context_window: int = 200_000
    """Prompts counting more tokens than this get the wire's "prompt is too long" 400."""
    min_cacheable_tokens: int = 1024
    """Shortest prefix either wire caches (Anthropic breakpoints, OpenAI's first step)."""
    required_key: str | None = None
    """When set, only this key is accepted; otherwise any non-empty key is."""
    model: str = "sim-model"
    """Listed by `GET /v1/models`; requests may name any model."""

    def updated(self, changes: dict[str, Any]) -> SimulatorConfig:
        """A copy with `changes` applied, each checked against the field's type."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ConfigError(f"unknown settings: {', '.join(unknown)}")
        checked = {name: _check(name, value) for name, value in changes.items()}
        return replace(self, **checked)


def _check(name: str, value: Any) -> Any:
    if name in ("required_key",):
        if value is None or (isinstance(value, str) and value):
            return value
        raise ConfigError(f"{name} must be a non-empty string or null")
    if name == "model":
        if isinstance(value, str) and value:
            return value
        raise ConfigError("model must be a non-empty string")
    # bool is an int subclass, and `true` as a token count is a test bug worth reporting.
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{name} must be a non-negative number")
    if name in ("context_window", "min_cacheable_tokens"):
        if not float(value).is_integer():
            raise ConfigError(f"{name} must be a whole number")
        return int(value)
    return float(value)

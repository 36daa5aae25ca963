"""The one place a configured provider kind becomes an adapter instance."""

from __future__ import annotations

from typing import Literal, assert_never

import httpx

from app.providers.anthropic import AnthropicProvider
from app.providers.base import Provider
from app.providers.openai_chat import OpenAIChatProvider

ProviderKind = Literal["openai", "anthropic"]

DEFAULT_BASE_URLS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}


def build_provider(
    kind: ProviderKind,
    *,
    base_url: str | None,
    api_key: str | None,
    cache_markers: bool = False,
    timeout: float = 600,
    http_client: httpx.AsyncClient | None = None,
) -> Provider:
    """An adapter for `kind`. `cache_markers` only applies to the OpenAI wire shape: the
    Anthropic wire always carries its markers natively. No base URL means the provider's
    public endpoint. `http_client` is a shared pool for the OpenAI wire (the Anthropic SDK
    keeps its own)."""
    base_url = base_url or DEFAULT_BASE_URLS[kind]
    match kind:
        case "openai":
            return OpenAIChatProvider(
                base_url,
                api_key,
                timeout=timeout,
                cache_markers=cache_markers,
                http_client=http_client,
            )
        case "anthropic":
            return AnthropicProvider(base_url, api_key, timeout=timeout)
        case _:
            assert_never(kind)

"""The one place a configured provider kind becomes an adapter instance."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, assert_never

from app.providers.anthropic import AnthropicProvider
from app.providers.base import Provider
from app.providers.clients import UpstreamClients
from app.providers.keyring import KeyStates, RotatingProvider, fingerprint
from app.providers.openai_chat import OpenAIChatProvider
from app.security.outbound import NO_SCAN, OutboundScan

if TYPE_CHECKING:
    from app.config import Profile

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
    clients: UpstreamClients | None = None,
    outbound: OutboundScan = NO_SCAN,
) -> Provider:
    """An adapter for `kind`. `cache_markers` only applies to the OpenAI wire shape: the
    Anthropic wire always carries its markers natively. No base URL means the provider's
    public endpoint. `clients` lends the adapter its upstream's shared pool (without it,
    the adapter keeps a client of its own)."""
    base_url = base_url or DEFAULT_BASE_URLS[kind]
    match kind:
        case "openai":
            return OpenAIChatProvider(
                base_url,
                api_key,
                timeout=timeout,
                cache_markers=cache_markers,
                http_client=clients.for_url(base_url, timeout=timeout) if clients else None,
                outbound=outbound,
            )
        case "anthropic":
            # The SDK is built on httpx2, a fork of httpx: its client is a separate one.
            sdk_client = clients.sdk_client_for_url(base_url, timeout=timeout) if clients else None
            return AnthropicProvider(
                base_url, api_key, timeout=timeout, http_client=sdk_client, outbound=outbound
            )
        case _:
            assert_never(kind)


def build_keyed_provider(
    profile: Profile,
    key_states: KeyStates,
    *,
    base_url: str | None = None,
    clients: UpstreamClients | None = None,
    outbound: OutboundScan = NO_SCAN,
) -> Provider:
    """The profile's adapter; with several upstream keys, a ring that rotates past a
    throttled or refused one (every key's adapter shares the upstream's pool)."""
    keys = [k.get_secret_value() for k in (profile.api_key, *profile.api_keys) if k]
    keys = list(dict.fromkeys(keys))  # one key listed twice is still one key

    def one(key: str | None) -> Provider:
        return build_provider(
            profile.provider,
            base_url=base_url or profile.base_url,
            api_key=key,
            cache_markers=profile.cache_markers,
            timeout=profile.upstream_timeout_s,
            clients=clients,
            outbound=outbound,
        )

    if len(keys) <= 1:
        return one(keys[0] if keys else None)
    keyed = [(fingerprint(key), one(key)) for key in keys]
    return RotatingProvider(profile.name, keyed, key_states, cooldown_s=profile.key_cooldown_s)

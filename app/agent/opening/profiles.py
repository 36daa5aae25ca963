"""The configured agent profiles, found by name or alias, with their upstreams.

A request's `model` names a profile (or an alias of one, e.g. a vendor model name a client
cannot change); a profile that accepts any model catches the rest, so an app with a fixed
model list still reaches the agent.
"""

from __future__ import annotations

from collections.abc import Iterator

from app.agent.cost.spend_caps import price_override
from app.agent.refusals import UnknownModel
from app.agent.turn_context import Route
from app.config import Profile, Settings
from app.providers.base import Provider


class Profiles:
    def __init__(self, settings: Settings, providers: dict[str, Provider]) -> None:
        self.providers = providers
        self.by_name = {p.name: p for p in settings.all_profiles()}
        self.aliases = {a: p for p in self.by_name.values() for a in p.aliases}
        self._catch_all = next((p for p in self.by_name.values() if p.accept_any_model), None)

    def resolve(self, model: str) -> Profile:
        found = self.by_name.get(model) or self.aliases.get(model) or self._catch_all
        if found is None:
            raise UnknownModel(model)
        return found

    def get(self, name: str) -> Profile | None:
        return self.by_name.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def __iter__(self) -> Iterator[Profile]:
        return iter(self.by_name.values())

    def provider(self, profile: Profile) -> Provider:
        return self.providers[profile.name]

    def fallback_routes(self, profile: Profile) -> tuple[Route, ...]:
        return tuple(
            Route(self.by_name[n], self.providers[n], price_override(self.by_name[n]))
            for n in profile.fallback
        )

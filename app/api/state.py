"""Everything a running server holds below its endpoints, built once in the lifespan.

The endpoints' serving objects are not here: each endpoint reads its own from `app.state`
(vLLM's habit), so this module imports nothing of `app/api` and every route and the shared
plumbing in `app/api/http/` can read it without an import running back up.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.agent.approvals import ApprovalGate
from app.agent.opening.profiles import Profiles
from app.agent.opening.session_setup import SessionSetup
from app.agent.turns.manager import TurnManager
from app.config import Settings
from app.db.store import Store
from app.observe.metrics import Metrics
from app.providers.base import Provider
from app.security.auth import Authenticator
from app.security.rate_limits import Limits
from app.tools.registry import ToolRegistry


@dataclass(frozen=True)
class AppState:
    settings: Settings
    store: Store
    auth: Authenticator
    turns: TurnManager
    providers: dict[str, Provider]
    profiles: Profiles
    """The profiles every endpoint resolves a model name against (one instance: the turn
    serving object's)."""
    setup: SessionSetup
    """How a session's prompt and workspace are set up (a fork sets up its copy)."""
    tools: ToolRegistry
    started_at: int
    metrics: Metrics
    approvals: ApprovalGate
    limits: Limits

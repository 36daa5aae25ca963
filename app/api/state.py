"""Everything a running server holds, built once in the lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from app.agent.approvals import ApprovalGate
from app.agent.turns.manager import TurnManager
from app.api.chat.serving import ChatServing
from app.api.responses.serving import ResponsesServing
from app.config import Settings
from app.db.store import Store
from app.observe.metrics import Metrics
from app.providers.base import Provider
from app.security.auth import Authenticator
from app.security.rate_limits import Limits


@dataclass
class AppState:
    settings: Settings
    store: Store
    auth: Authenticator
    turns: TurnManager
    providers: dict[str, Provider]
    chat: ChatServing
    started_at: int
    metrics: Metrics
    approvals: ApprovalGate
    limits: Limits
    responses: ResponsesServing
    """The Responses API on top of `chat`; it owns the tasks that record responses."""

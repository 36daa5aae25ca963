"""Everything a running server holds, built once in the lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from app.agent.turns import TurnManager
from app.config import Settings
from app.db.store import Store
from app.metrics import Metrics
from app.providers.base import Provider
from app.responses_serving import ResponsesServing
from app.security.approvals import ApprovalGate
from app.security.auth import Authenticator
from app.security.limits import Limits
from app.serving import ChatServing


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

"""GET /v1/models and /v1/models/{id}: discovery for Open WebUI and friends."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.chat.wire import ModelCard, ModelList
from app.api.http.deps import PrincipalDep, StateDep
from app.api.http.errors import ApiError

router = APIRouter()


@router.get("/v1/models")
async def list_models(state: StateDep, _principal: PrincipalDep) -> ModelList:
    created = state.started_at
    # Aliases are listed too: an app that only offers models it discovered can pick the
    # vendor name it defaults to.
    names = [*state.profiles.by_name, *state.profiles.aliases]
    return ModelList(data=[ModelCard(id=name, created=created) for name in names])


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, state: StateDep, _principal: PrincipalDep) -> ModelCard:
    if model_id not in state.profiles.by_name and model_id not in state.profiles.aliases:
        raise ApiError(
            404, f"the model '{model_id}' does not exist", param="model", code="model_not_found"
        )
    return ModelCard(id=model_id, created=state.started_at)

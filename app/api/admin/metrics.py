"""GET /metrics: Prometheus text format, for keys with the `metrics` scope."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from app.api.http.deps import MetricsPrincipalDep, StateDep

router = APIRouter()


@router.get("/metrics")
async def metrics(state: StateDep, _principal: MetricsPrincipalDep) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

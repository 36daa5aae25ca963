"""HTTP plumbing all endpoints share: deps, SSE, CORS, body limits, errors, statuses."""

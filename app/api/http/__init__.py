"""HTTP plumbing all endpoints share: deps, one SSE response with one keepalive loop, CORS,
body limits, errors, statuses."""

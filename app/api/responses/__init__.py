"""The Responses API (/v1/responses): router, wire models and serving object."""

"""/v1/responses: router, wire models, translation, rendering, serving object."""

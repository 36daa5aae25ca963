"""POST /v1/chat/completions: router, wire models, translation, rendering, serving object."""

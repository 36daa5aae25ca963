"""What a client or an orchestrator asks before it works: health, models, capabilities."""

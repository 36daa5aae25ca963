"""Opening a turn: the session found or created, its lease, prompt, tools and profile."""

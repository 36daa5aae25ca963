"""Opening a turn: the session found or created, its lease, workspace, tool snapshot, profile."""

"""/v1/sessions: listing, reading, forking, retracting; a session's turns, events, cost."""

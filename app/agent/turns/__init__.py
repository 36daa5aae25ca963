"""Running turns: the manager and handles, finished turns, event log, recovery, relay."""

"""The HTTP face: a folder per endpoint, the plumbing they share in `http/`, and what every
endpoint that runs a turn shares (`turn_serving.py`, `retries.py`, `state.py`)."""

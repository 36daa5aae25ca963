"""The HTTP face: a folder per endpoint, and the plumbing they share in `http/`."""

"""Shared test helpers (a real upstream simulator process, fixtures)."""

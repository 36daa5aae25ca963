"""Operator commands behind `courier`: doctor, sessions, usage, keys."""

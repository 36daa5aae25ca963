"""Webhooks: signed events announcing what finished while nobody was connected."""

"""Operator routes: approvals, minted tokens, usage, metrics, OpenAPI, the console."""

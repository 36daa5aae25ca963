"""The jobs API (`/v1/jobs`), its runner and the scheduler loop (docs/jobs.md)."""

"""Scheduled jobs: cron schedules in UTC, the scheduler that fires each tick once."""

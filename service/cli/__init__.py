"""The ``jobq`` command (see :mod:`service.cli.app` for its exit codes)."""

from service.cli import explain, items, jobs, limits, ops, processes, schedules, tokens  # noqa: F401  (each registers its commands on the app)
from service.cli.app import app, main

__all__ = ["app", "main"]

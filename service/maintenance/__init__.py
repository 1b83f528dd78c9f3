"""Background upkeep every worker runs: each task is ``run_once() -> Result`` plus a thin loop."""

from service.maintenance.reaper import Reaper

__all__ = ["Reaper"]

"""Background upkeep: each task is ``run_once() -> Result``, with no loop of its own. The worker's
maintenance thread runs the reaper (:class:`service.worker.runtime.Duty`); ``jobq prune`` runs the pruner."""

from service.maintenance.reaper import Reaper

__all__ = ["Reaper"]

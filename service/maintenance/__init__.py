"""Background upkeep: each task is ``run_once() -> Result``, with no loop of its own. A worker's
maintenance thread runs them as duties (:mod:`service.maintenance.duties`, one thin loop; the
fleet's duties only while the worker leads); ``jobq prune`` runs the pruner."""

from service.maintenance.reaper import Reaper

__all__ = ["Reaper"]

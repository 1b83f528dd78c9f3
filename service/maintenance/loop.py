"""The thin loop every background service shares: ``run_once`` at a jittered interval."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from service.errors import StoreUnavailable

logger = logging.getLogger("jobq.maintenance")


def run_every(
    task: Callable[[], object],
    stop: threading.Event,
    interval: float,
    *,
    name: str,
    on_error: Callable[[StoreUnavailable], None] | None = None,
    rng: random.Random | None = None,
) -> None:
    """Call ``task`` every ``interval`` seconds (jittered +-50 %, so hosts drift apart) until ``stop``.

    A database that cannot be reached is reported to ``on_error`` and tried again
    next round; any other error is logged as ``{name}.error``, never raised.
    """
    rng = rng or random.Random()
    while not stop.wait(rng.uniform(0.5 * interval, 1.5 * interval)):
        try:
            task()
        except StoreUnavailable as exc:
            if on_error is not None:
                on_error(exc)
        except Exception:
            logger.exception(f"{name}.error")

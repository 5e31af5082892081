"""Starting or joining Ray, with the settings hierl needs on a small local machine, and
``ActorGroup``: how a component declares the Ray actors it reserves resources for."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any

# Ray 2.60 enables token auth by default (a warning and a token file in $HOME); local
# runs do not need it.  Usage stats phone home.  Set before ray is imported anywhere.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_COLOR_PREFIX", "0")

DEFAULT_GET_TIMEOUT_S = 600.0
"""Upper bound on any blocking ``ray.get`` hierl makes (a dead actor must not hang us)."""


def ensure_ray(address: str | None = None, **init_kwargs: Any) -> None:
    """Start a local Ray instance, or join ``address``, unless Ray is already up; then
    publish the names registered in this process (``hierl.shared_registry``)."""
    import ray

    from hierl.shared_registry import publish_all

    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"logging_level": "ERROR", "include_dashboard": False}
        kwargs.update(init_kwargs)
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(**kwargs)
    publish_all()  # envs and models registered by name reach the Ray workers


def exit_at_sigterm() -> None:
    """In a Ray actor whose work is done, make SIGTERM end the process at once.

    Ray's own handler raises ``SystemExit`` wherever the main thread is.  When that is a
    finalizer or a weakref callback, Python prints "Exception ignored ... SystemExit"
    with a traceback and carries on, so the process outlives the signal and the
    driver's output shows Ray's traceback after a clean run (Tune stops a finished
    trial, then ``ray.kill``s its actor).  Does nothing outside a Ray actor or off the
    main thread.
    """
    import ray

    if not ray.is_initialized() or ray.get_runtime_context().get_actor_id() is None:
        return
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_now)


def _exit_now(signum: int, frame: Any) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)  # Ray's handler exits with 1 too


@dataclasses.dataclass
class ActorGroup:
    """``count`` Ray actors of one kind, each reserving ``bundle`` (e.g. 2 evaluators of
    ``{"CPU": 1.0}``), and the settings that size them.

    Components declare the actors they will start this way (an optimizer's
    ``actor_groups``, a trainer class's ``actor_groups``) so that
    ``hierl.algorithms.resources`` can reserve them and, when they can never fit, name
    them and compute which setting would make them fit.
    """

    what: str
    """The kind of actor, singular (``"evaluator"``, ``"Ape-X replay shard"``)."""
    count: int
    """How many such actors are started."""
    bundle: Mapping[str, float]
    """What each reserves (``{"CPU": 0.5}``); zero entries are dropped, ``{}``: nothing."""
    count_setting: str = ""
    """The config setting that sets ``count`` (``"num_evaluators"``; ``""``: none)."""
    share_settings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Resource name → the setting of each actor's share (``{"CPU": "num_cpus_per_evaluator"}``)."""

    def __post_init__(self) -> None:
        self.bundle = {k: float(v) for k, v in self.bundle.items() if v > 0}

    @classmethod
    def from_settings(cls, what: str, config: Any, count: str, cpus_each: str) -> ActorGroup:
        """Actors whose number and CPU share are ``config``'s settings named ``count`` and
        ``cpus_each`` (the names a request that can never fit proposes to change)."""
        cpus = getattr(config, cpus_each)
        return cls(what, getattr(config, count), {"CPU": cpus}, count, {"CPU": cpus_each})

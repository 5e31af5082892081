"""Names registered in the driver that Ray workers of the same job can look up.

``hierl.register_env`` and ``hierl.register_model`` keep a name → callable table in the
process that calls them.  A remote evaluator, Tune trial or population member runs in
another process, where only the *name* arrives (configs and checkpoints never hold
code), so each ``SharedRegistry`` also puts its entries, cloudpickled, in the Ray
cluster's internal key-value store under this job's id: when an entry is registered if
Ray is up, and again after every ``ray.init`` of this process (what
``ray.tune.registry`` does for ``tune.register_env``).  A worker that does not know a
name looks it up there.  Nothing is read from files; the store holds only what this job
put there.  This module imports Ray only when Ray is already imported.
"""

from __future__ import annotations

import sys
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_REGISTRIES: list[SharedRegistry[Any]] = []
_hook_installed = False


class SharedRegistry(Generic[T]):
    """A name → object table shared with the Ray workers of this job.

    Args:
        kind: what it holds (``"envs"``, ``"models"``): the key prefix in Ray's store.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._local: dict[str, T] = {}
        _REGISTRIES.append(self)

    def register(self, name: str, value: T) -> None:
        """Register ``value`` as ``name`` here and for this job's Ray workers (published
        now if Ray is up, else by ``publish_all`` when hierl starts Ray)."""
        self._local[name] = value
        if "ray" in sys.modules:  # a later ray.init of the user's publishes it too
            _install_hook()
        self._publish()

    def get(self, name: str) -> T | None:
        """The object registered as ``name`` here or by this job's driver, else None."""
        if name in self._local:
            return self._local[name]
        value = self._fetch(name)
        if value is not None:
            self._local[name] = value
        return value

    def names(self) -> list[str]:
        """Every registered name (a Ray worker's include the driver's)."""
        return sorted({*self._local, *self._shared_names()})

    # -- Ray's key-value store ---------------------------------------------------------
    def _prefix(self) -> str:
        import ray

        return f"hierl/{self.kind}/{ray.get_runtime_context().get_job_id()}/"

    def _publish(self) -> None:
        kv = _kv()
        if kv is None or not self._local:
            return
        from ray import cloudpickle

        prefix = self._prefix()
        for name, value in self._local.items():
            kv._internal_kv_put(prefix + name, cloudpickle.dumps(value), overwrite=True)

    def _fetch(self, name: str) -> T | None:
        kv = _kv()
        if kv is None:
            return None
        data = kv._internal_kv_get(self._prefix() + name)
        if data is None:
            return None
        from ray import cloudpickle

        # Written by this job's own driver (``_publish``) into the cluster's control store,
        # as Ray ships every task and actor; never read from a file or a checkpoint.
        return cloudpickle.loads(data)  # safe: this job's own registrations

    def _shared_names(self) -> list[str]:
        kv = _kv()
        if kv is None:
            return []
        prefix = self._prefix()
        keys = kv._internal_kv_list(prefix)
        return [(k.decode() if isinstance(k, bytes) else k)[len(prefix) :] for k in keys]


def _kv() -> Any:
    """Ray's internal key-value module when this process is connected to Ray, else None."""
    if "ray" not in sys.modules:
        return None
    from ray.experimental import internal_kv

    return internal_kv if internal_kv._internal_kv_initialized() else None


def _install_hook() -> None:
    """Publish every registry after each later ``ray.init`` of this process."""
    global _hook_installed
    if _hook_installed:
        return
    import ray._private.worker

    ray._private.worker._post_init_hooks.append(_publish_all)
    _hook_installed = True


def publish_all() -> None:
    """Publish every registry to the connected Ray cluster, and again after every later
    ``ray.init`` of this process (``hierl.evaluators.ray_runtime.ensure_ray`` calls it)."""
    _install_hook()
    _publish_all()


def _publish_all() -> None:
    for registry in _REGISTRIES:
        registry._publish()

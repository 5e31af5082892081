"""Snapshots of random generators, environments and the rollout loop, for exact resume.

Everything here is converted to numpy arrays and JSON scalars (``hierl.checkpoint`` stores
those without pickle).  Three layers:

* **Process RNGs** (``get_rng_state`` / ``set_rng_state``): Python ``random``,
  numpy's global generator and torch's CPU generator.  Policies draw their action noise
  from torch's global generator, so this covers action sampling in the driver.
* **Environments** (``snapshot_env`` / ``restore_env``): an env (or any wrapper
  in its chain, or a native ``VectorEnv``) that defines ``get_state()`` / ``set_state()``
  is saved through them.  Otherwise every instance attribute is saved if it is *plain
  data* (numbers, strings, None, numpy arrays, lists/tuples/deques/str-keyed dicts of
  those, ``numpy.random.Generator`` / ``RandomState`` as their bit-generator state) or an
  ALE emulator (its ``cloneState(include_rng=True)`` bytes, restored in place); spaces,
  specs, enums, callables and wrapped envs are skipped as static.  An attribute of any
  other type (a physics engine, a subprocess pipe) makes the env *not snapshotable*:
  ``NotSnapshotable`` names it.  Gymnasium's classic-control and toy-text envs and
  their standard wrappers (TimeLimit, OrderEnforcing, PassiveEnvChecker) are plain data,
  and so is the DeepMind Atari pipeline over ale-py (frame stacks, episode statistics).
* **The rollout loop** (``get_sampler_state`` / ``set_sampler_state``): the
  current (filtered) observations, per-sub-env episode ids, returns and lengths,
  recurrent states, the carried-over partial episodes of ``complete_episodes`` and the
  envs' snapshot, so sampling continues mid-episode exactly where it stopped.
"""

from __future__ import annotations

import collections
import enum
import itertools
import random
import types
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv

from hierl.evaluators.env_kinds import env_kind, env_types
from hierl.sample_batch import SampleBatch

# Attributes that only describe an env (never change while it runs).
_STATIC_NAMES = frozenset(
    {"_saved_kwargs", "metadata", "spec", "_cached_spec", "render_mode", "env_fns"}
)


# Types of attributes that only describe an env (other envs, of any registered kind, are
# saved separately: ``_is_static``).
_STATIC_TYPES = (
    gym.Space,
    gym.envs.registration.EnvSpec,
    enum.Enum,
    type,
    types.FunctionType,
    types.MethodType,
    types.ModuleType,
)


class NotSnapshotable(TypeError):
    """An env holds state that cannot be saved as arrays and JSON (the message names it)."""


# -- process RNGs --------------------------------------------------------------------------
def get_rng_state() -> dict[str, Any]:
    """This process's Python, numpy-global and torch-CPU generator states."""
    import torch

    version, internal, gauss = random.getstate()
    _name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": {"version": version, "state": list(internal), "gauss": gauss},
        "numpy": {
            "keys": np.asarray(keys, dtype=np.uint32),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state().numpy().copy(),
    }


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Inverse of ``get_rng_state``."""
    import torch

    py = state["python"]
    random.setstate((int(py["version"]), tuple(int(x) for x in py["state"]), py["gauss"]))
    npy = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            np.asarray(npy["keys"], dtype=np.uint32),
            int(npy["pos"]),
            int(npy["has_gauss"]),
            float(npy["cached_gaussian"]),
        )
    )
    torch.set_rng_state(torch.from_numpy(np.array(state["torch"], dtype=np.uint8)))


# -- plain data ----------------------------------------------------------------------------
def _is_static(value: Any) -> bool:
    return isinstance(value, _STATIC_TYPES + env_types())


def _is_ale(value: Any) -> bool:
    """An Atari emulator (``ale_py.ALEInterface``): saved with its own clone/restore, RNG
    (sticky actions) included."""
    return type(value).__module__.startswith("ale_py") and hasattr(value, "cloneState")


def _encode(value: Any, where: str) -> Any:
    """``value`` as arrays / JSON with type markers; NotSnapshotable if it is not plain."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise NotSnapshotable(f"{where} is an object array")
        return value.copy()
    if isinstance(value, np.generic):
        return {"__scalar__": np.asarray(value)}
    if isinstance(value, np.random.Generator):
        return {"__generator__": value.bit_generator.state}
    if isinstance(value, np.random.RandomState):
        return {"__randomstate__": value.get_state(legacy=False)}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, collections.deque):  # frame stacks, episode-statistics queues
        items = [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return {"__deque__": items, "maxlen": value.maxlen}
    if _is_ale(value):
        state = value.cloneState(include_rng=True).__getstate__()  # bytes, no pickle
        return {"__ale__": np.frombuffer(state, dtype=np.uint8).copy()}
    if isinstance(value, list):
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _encode(v, f"{where}[{k!r}]") for k, v in value.items()}}
    raise NotSnapshotable(f"{where} has type {type(value).__name__}")


def _decode(value: Any, current: Any = None) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        if isinstance(value, np.ndarray):
            return np.array(value, copy=True)
        return value
    if "__scalar__" in value:
        return np.asarray(value["__scalar__"])[()]
    if "__tuple__" in value:
        return tuple(_decode(v) for v in value["__tuple__"])
    if "__deque__" in value:
        maxlen = value["maxlen"]
        return collections.deque(
            (_decode(v) for v in value["__deque__"]), None if maxlen is None else int(maxlen)
        )
    if "__ale__" in value:
        if not _is_ale(current):
            raise ValueError("env snapshot holds an ALE emulator state for a non-ALE attribute")
        import ale_py

        state = ale_py.ALEState.__new__(ale_py.ALEState)
        # ALE's own deserializer (C++), not pickle: no code runs from the checkpoint
        state.__setstate__(np.asarray(value["__ale__"], dtype=np.uint8).tobytes())
        current.restoreState(state)
        return current
    if "__dict__" in value:
        return {k: _decode(v) for k, v in value["__dict__"].items()}
    if "__generator__" in value:
        state = value["__generator__"]
        gen = current
        if not isinstance(gen, np.random.Generator):
            gen = np.random.Generator(getattr(np.random, str(state["bit_generator"]))())
        gen.bit_generator.state = state
        return gen
    if "__randomstate__" in value:
        rs = current if isinstance(current, np.random.RandomState) else np.random.RandomState()
        rs.set_state(value["__randomstate__"])
        return rs
    raise ValueError(f"unknown env snapshot entry {sorted(value)}")


def _has_own_state_api(obj: Any) -> bool:
    return callable(getattr(type(obj), "get_state", None)) and callable(
        getattr(type(obj), "set_state", None)
    )


def _snapshot_object(obj: Any) -> dict[str, Any]:
    if _has_own_state_api(obj):
        return {"custom": obj.get_state()}
    attrs = {}
    for name, value in vars(obj).items():
        if name in _STATIC_NAMES or _is_static(value):
            continue
        if isinstance(value, (list, tuple)) and value and all(_is_static(v) for v in value):
            continue  # e.g. SyncVectorEnv.envs, saved one by one
        attrs[name] = _encode(value, f"{type(obj).__name__}.{name}")
    return {"attrs": attrs}


def _restore_object(obj: Any, snap: Mapping[str, Any]) -> None:
    if "custom" in snap:
        obj.set_state(snap["custom"])
        return
    for name, value in snap["attrs"].items():
        current = getattr(obj, name, None)
        decoded = _decode(value, current)
        if (
            isinstance(current, np.ndarray)
            and isinstance(decoded, np.ndarray)
            and current.shape == decoded.shape
            and current.dtype == decoded.dtype
            and current.flags.writeable
        ):
            current[...] = decoded  # in place: other buffers may alias it (copy=False)
        else:
            setattr(obj, name, decoded)


def _chain(env: Any) -> list[Any]:
    """``env`` and every env it wraps (``.env``), outermost first."""
    out = [env]
    while isinstance(getattr(out[-1], "env", None), env_types()) and len(out) < 64:
        out.append(out[-1].env)
    return out


def snapshot_env(env: gym.Env | VectorEnv) -> dict[str, Any]:
    """The dynamic state of ``env`` (a single env or a vector env) and everything it wraps.

    Raises:
        NotSnapshotable: some attribute is not plain data (named in the message).
    """
    snap: dict[str, Any] = {"chain": [_snapshot_object(o) for o in _chain(env)]}
    sub_envs = env_kind(env).sub_envs(env)
    if sub_envs:
        snap["envs"] = [snapshot_env(e) for e in sub_envs]
    return snap


def restore_env(env: gym.Env | VectorEnv, snap: Mapping[str, Any]) -> None:
    """Inverse of ``snapshot_env`` on an env built the same way.

    Raises:
        ValueError: the snapshot is of an env with another structure.
    """
    chain = _chain(env)
    if len(chain) != len(snap["chain"]):
        raise ValueError(
            f"env snapshot has {len(snap['chain'])} wrapper levels, this env {len(chain)}"
        )
    for obj, s in zip(chain, snap["chain"], strict=True):
        _restore_object(obj, s)
    if "envs" in snap:
        sub_envs = env_kind(env).sub_envs(env)
        if len(sub_envs) != len(snap["envs"]):
            raise ValueError(
                f"env snapshot has {len(snap['envs'])} sub-envs, this vector env {len(sub_envs)}"
            )
        for e, s in zip(sub_envs, snap["envs"], strict=True):
            restore_env(e, s)


# -- the rollout loop ----------------------------------------------------------------------
def get_sampler_state(sampler: Any) -> dict[str, Any]:
    """A ``VectorSampler``'s position: observations, episode accumulators, carried partial
    episodes and its envs' snapshot.

    Returns ``{"exact": False, "reason": ...}`` when the envs cannot be snapshotted.
    """
    try:
        env = snapshot_env(sampler.venv)
    except NotSnapshotable as e:
        return {"exact": False, "reason": str(e)}
    # itertools.count cannot be read without advancing: read it and put a copy back.
    next_eps = next(sampler._eps_counter)
    sampler._eps_counter = itertools.count(next_eps)
    carry = sampler._carry
    return {
        "exact": True,
        "env": env,
        "obs": np.array(sampler.obs, copy=True),
        "eps_id": sampler.eps_id.copy(),
        "ep_return": sampler.ep_return.copy(),
        "ep_len": sampler.ep_len.copy(),
        "pending_reset": sampler.pending_reset.copy(),
        "state": [np.array(s, copy=True) for s in sampler.state],
        "next_eps_id": int(next_eps),
        "steps_sampled": int(sampler.steps_sampled),
        "carry": None if carry is None else {k: np.array(v) for k, v in carry.items()},
    }


def set_sampler_state(sampler: Any, state: Mapping[str, Any]) -> None:
    """Inverse of ``get_sampler_state`` on a sampler built from the same config.

    Raises:
        ValueError: the state does not fit this sampler (number of envs, shapes).
    """
    obs = np.asarray(state["obs"])
    if obs.shape != sampler.obs.shape:
        raise ValueError(
            f"sampler state has observations of shape {obs.shape}, this sampler "
            f"{sampler.obs.shape} (num_envs_per_evaluator or the env differ)"
        )
    restore_env(sampler.venv, state["env"])
    sampler.obs = np.array(obs, dtype=sampler.obs.dtype, copy=True)
    sampler.eps_id = np.array(state["eps_id"], dtype=np.int64)
    sampler.ep_return = np.array(state["ep_return"], dtype=np.float64)
    sampler.ep_len = np.array(state["ep_len"], dtype=np.int64)
    sampler.pending_reset = np.array(state["pending_reset"], dtype=bool)
    sampler.state = [np.array(s, copy=True) for s in state["state"]]
    sampler._eps_counter = itertools.count(int(state["next_eps_id"]))
    sampler.steps_sampled = int(state["steps_sampled"])
    carry = state.get("carry")
    sampler._carry = None if carry is None else SampleBatch(dict(carry))

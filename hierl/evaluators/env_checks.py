"""Checks on the data envs return, so bad observations or rewards never reach the weights.

The rollout loops call these with one line each (on every reset and step):

* **non-finite values** — NaN or ±inf in an observation (after flattening) or a reward;
* **out-of-space observations** — for ``Box`` spaces: shape and the declared bounds
  (``low <= obs <= high``, elementwise); for ``Discrete``: ``start <= obs < start + n``.
  Other spaces (Dict, Tuple, MultiBinary...) get the finiteness check only.

These are vectorised array comparisons over the whole env vector (a few microseconds a
step; ``observation_space.contains`` per sub-env would be a Python loop).  A failure
raises ``EnvDataError`` naming the env id, the evaluator, the step, the sub-env and
the offending values.  To accept such data anyway, fix it in a Gymnasium wrapper in the
env creator (e.g. ``gymnasium.wrappers.ClipObservation``, ``nan_to_num``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

_MAX_SHOWN = 6


class EnvDataError(ValueError):
    """An env returned a NaN/inf observation or reward, or an observation outside its
    declared observation space."""


def _show(values: np.ndarray) -> str:
    flat = np.asarray(values).reshape(-1)
    text = np.array2string(flat[:_MAX_SHOWN], precision=4, separator=", ")
    return text[:-1] + ", ...]" if flat.size > _MAX_SHOWN else text


def _fail(sampler: Any, step: int | None, what: str, rows: np.ndarray, values: np.ndarray) -> None:
    where = "reset()" if step is None else f"step {step}"
    raise EnvDataError(
        f"env '{sampler.env_id}' on evaluator {sampler.worker_index} returned {what} at "
        f"{where} (sub-env {int(rows[0])}): {_show(values)}"
    )


def _bounds(space: gym.Space) -> tuple[np.ndarray, np.ndarray] | None:
    if isinstance(space, gym.spaces.Box):
        return space.low, space.high
    if isinstance(space, gym.spaces.Discrete):
        return np.asarray(space.start), np.asarray(space.start + space.n - 1)
    return None


def check_observations(
    sampler: Any,
    raw: Any,
    step: int | None,
    rows: np.ndarray | None = None,
    flat: np.ndarray | None = None,
) -> None:
    """EnvDataError unless the batched raw observations ``raw`` (one row per sub-env of
    ``sampler.obs_space``) are finite and inside the space; ``step`` None = a reset.

    ``rows``: check only these sub-envs (array observations; others are checked whole).
    ``flat``: ``raw`` already preprocessed (spaces other than Box and Discrete are
    checked on it; computed here when not given).
    """
    space = sampler.obs_space
    if rows is not None and isinstance(raw, np.ndarray):
        raw = raw[rows]
        flat = None if flat is None else flat[rows]
    bounds = _bounds(space)
    if bounds is None:
        flat = sampler.preprocessor.transform(raw) if flat is None else flat
        flat = np.asarray(flat, dtype=np.float64)
        bad = ~np.isfinite(flat.reshape(len(flat), -1)).all(axis=1)
        if bad.any():
            _fail(sampler, step, "a non-finite observation", np.flatnonzero(bad), flat[bad][0])
        return
    obs = np.asarray(raw)
    low, high = bounds
    # Fast path (one pass): NaN fails both comparisons, so this also rejects NaN.
    if obs.shape[1:] == space.shape and ((obs >= low) & (obs <= high)).all():
        return
    shape = getattr(space, "shape", ())
    if obs.shape[1:] != tuple(shape):
        raise EnvDataError(
            f"env '{sampler.env_id}' on evaluator {sampler.worker_index} returned "
            f"observations of shape {obs.shape[1:]} at "
            f"{'reset()' if step is None else f'step {step}'}; its observation space "
            f"{space} has shape {tuple(shape)}"
        )
    rows = obs.reshape(len(obs), -1)
    if np.issubdtype(obs.dtype, np.floating):
        bad = ~np.isfinite(rows).all(axis=1)
        if bad.any():
            _fail(sampler, step, "a non-finite observation", np.flatnonzero(bad), obs[bad][0])
    bad = ((obs < low) | (obs > high)).reshape(len(obs), -1).any(axis=1)
    if bad.any():
        _fail(
            sampler,
            step,
            f"an observation outside its observation space {space}",
            np.flatnonzero(bad),
            obs[bad][0],
        )


def check_step(
    sampler: Any,
    raw: Any,
    rewards: Any,
    info: dict[str, Any],
    step: int,
    flat: np.ndarray | None = None,
) -> None:
    """Check one vector-env step: observations, rewards and SAME_STEP final observations.

    ``step`` is the evaluator's env step count (``sampler.env_steps``); ``flat`` is
    ``raw`` preprocessed, if the caller has it.
    """
    rew = np.asarray(rewards)
    if not np.isfinite(rew).all():
        bad = ~np.isfinite(rew)
        _fail(sampler, step, "a non-finite reward", np.flatnonzero(bad), rew[bad])
    check_observations(sampler, raw, step, flat=flat)
    final = info.get("final_obs") if isinstance(info, dict) else None
    if final is not None and "_final_obs" in info and np.any(info["_final_obs"]):
        from hierl.evaluators.rollout_core import batch_obs

        idx = np.flatnonzero(info["_final_obs"])
        check_observations(sampler, batch_obs(sampler.obs_space, list(final[idx])), step)

"""The vector env that plain Gymnasium envs are stepped in: Gymnasium's ``SyncVectorEnv``
(``SAME_STEP`` autoreset, no copies) with a leaner ``step`` for array spaces.

Gymnasium's ``step`` splits the actions and joins the observations through its
space-generic ``iterate`` / ``concatenate`` (``functools.singledispatch``) and merges an
empty info dict per sub-env.  For ``Box``, ``Discrete``, ``MultiDiscrete`` and
``MultiBinary`` spaces the same results come from indexing one array and writing rows
into another: on one HalfCheetah env the overhead over the bare env's step goes from
25-42 µs to 10-11 µs.  Other spaces (``Dict``, ``Tuple``, ...) go through Gymnasium's
``step`` unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
"""Single-env spaces whose batches are one numpy array (the lean ``step``'s domain)."""


class SameStepVectorEnv(SyncVectorEnv):
    """``SyncVectorEnv(env_fns, copy=False, autoreset_mode=SAME_STEP)`` whose ``step``
    returns the same observations, rewards, flags and infos with fewer Python calls when
    both spaces are array spaces (``ARRAY_SPACES``).

    As in Gymnasium's ``SAME_STEP`` mode, a sub-env whose episode ends is reset in the
    same step: the returned observation is the next episode's first, and the final one
    and its info are in ``info["final_obs"]`` / ``info["final_info"]``.  The observation
    array is the env's own buffer (``copy=False``): it changes at the next step.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        """Build the sub-envs from ``env_fns`` (one thunk per sub-env)."""
        super().__init__(env_fns, copy=False, autoreset_mode=AutoresetMode.SAME_STEP)
        self._lean = (
            isinstance(self.single_observation_space, ARRAY_SPACES)
            and isinstance(self.single_action_space, ARRAY_SPACES)
            and isinstance(self._observations, np.ndarray)
        )

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env with its row of ``actions``; Gymnasium's batched results."""
        if not self._lean:
            return super().step(actions)
        infos: dict[str, Any] = {}
        observations = self._observations
        # ``i`` names the sub-env in errors (hierl.evaluators.env._failing_sub_env).
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, env_info = env.step(actions[i])
            self._rewards[i] = reward
            self._terminations[i] = terminated
            self._truncations[i] = truncated
            if terminated or truncated:
                infos = self._add_info(infos, {"final_obs": obs, "final_info": env_info}, i)
                obs, env_info = env.reset()
            if env_info:
                infos = self._add_info(infos, env_info, i)
            self._env_obs[i] = obs
            observations[i] = obs
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        return (
            observations,
            self._rewards.copy(),
            self._terminations.copy(),
            self._truncations.copy(),
            infos,
        )

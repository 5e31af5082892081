"""SameStepVectorEnv: step for step what Gymnasium's SyncVectorEnv (SAME_STEP, copy=False)
returns, episode ends and infos included; the failing sub-env is still named."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from hierl.evaluators.env import EnvError, _failing_sub_env
from hierl.evaluators.vector_env import SameStepVectorEnv

pytestmark = pytest.mark.timeout(120)


class _InfoEnv(gym.Env):
    """Short random episodes whose infos vary: scalars, arrays, nested dicts, none."""

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, seed: int) -> None:
        self.observation_space = copy.deepcopy(obs_space)  # its own sampling generator
        self.observation_space.seed(seed)
        self.action_space = act_space
        self.rng = np.random.default_rng(seed)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None):
        self.t = 0
        return self.observation_space.sample(), {"start": True}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, self.action_space.dtype))
        self.t += 1
        kind = self.t % 4
        info: dict[str, Any] = [
            {},
            {"x": float(self.t), "n": self.t},
            {"vec": np.full(2, self.t, np.float32), "nested": {"k": self.t}},
            {"flag": True},
        ][kind]
        done = self.rng.random() < 0.1
        return self.observation_space.sample(), float(self.t), done, self.t >= 15, info


def _assert_same(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert a.shape == b.shape, where
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y, where)
    else:
        np.testing.assert_array_equal(a, b, err_msg=where)


SPACES = [
    (spaces.Box(-1, 1, (3,), np.float32), spaces.Box(-2, 2, (2,), np.float32)),
    (spaces.Discrete(5), spaces.Discrete(3)),
    (spaces.MultiDiscrete([2, 3]), spaces.MultiBinary(4)),
    (spaces.Box(0, 255, (4, 4), np.uint8), spaces.Discrete(2)),
    # not array spaces: Gymnasium's own step
    (spaces.Dict({"a": spaces.Discrete(2)}), spaces.Discrete(2)),
]


@pytest.mark.parametrize(("obs_space", "act_space"), SPACES)
@pytest.mark.parametrize("num_envs", [1, 3])
def test_same_results_as_gymnasium_sync_vector_env(obs_space, act_space, num_envs):
    def fns():
        def make(i: int):
            def thunk():
                return _InfoEnv(obs_space, act_space, seed=i)

            return thunk

        return [make(i) for i in range(num_envs)]

    ours = SameStepVectorEnv(fns())
    ref = SyncVectorEnv(fns(), copy=False, autoreset_mode=AutoresetMode.SAME_STEP)
    _assert_same(ours.reset(seed=0), ref.reset(seed=0))
    ref.action_space.seed(1)
    ends = 0
    for step in range(200):
        actions = ref.action_space.sample()
        got, want = ours.step(actions), ref.step(actions)
        _assert_same(got, want, f"step {step}")
        ends += int(np.sum(want[2] | want[3]))
    assert ends >= 10  # episode ends (both kinds) were compared too
    assert ours._lean == (not isinstance(obs_space, spaces.Dict))


def test_a_raising_sub_env_is_named():
    class Boom(_InfoEnv):
        def step(self, action):
            raise RuntimeError("boom")

    box = spaces.Box(-1, 1, (2,), np.float32)
    venv = SameStepVectorEnv(
        [lambda: _InfoEnv(box, box, 0), lambda: Boom(box, box, 1), lambda: _InfoEnv(box, box, 2)]
    )
    venv.reset(seed=0)
    with pytest.raises(RuntimeError) as info:
        venv.step(np.zeros((3, 2), np.float32))
    assert _failing_sub_env(info.value) == 1
    error = EnvError.wrap(info.value, env_id="x", worker_index=0, method="step", env_steps=5)
    assert "sub-env 1" in str(error)

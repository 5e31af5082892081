"""A new kind of environment is one registration (``hierl.evaluators.env_kinds``).

``CounterSim`` below is a batched simulator with its own API (no ``gymnasium.Env``, no
``VectorEnv``): ``begin()``, ``advance(actions)`` and spaces under its own names.  One
``register_env_kind`` call, from this test file, tells hierl its sampler, its spaces and
the envs its state is made of; a PolicyEvaluator then samples it, and
``hierl.evaluators.env_state`` snapshots and restores it, with no change in hierl.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from hierl.algorithms.pg import PGConfig, PGPolicy
from hierl.evaluators import EvaluatorSpec, PolicyEvaluator
from hierl.evaluators.env_kinds import ENV_KINDS, EnvKind, env_kind, register_env_kind
from hierl.evaluators.env_state import restore_env, snapshot_env
from hierl.evaluators.rollout_core import FragmentSampler, act
from hierl.sample_batch import SampleBatch as SB

pytestmark = pytest.mark.timeout(120)

EPISODE = 3
"""Steps of every CounterSim episode (its fragments are whole episodes)."""


class Counter(gym.Env):
    """One slot of the simulator: a step counter (plain data, so it can be snapshotted)."""

    observation_space = gym.spaces.Box(0.0, EPISODE, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = 0
        self.pushes = 0


class CounterSim:
    """``num_slots`` counters stepped in one call; the reward is the action (0 or 1)."""

    def __init__(self, num_slots: int) -> None:
        self.slots = [Counter() for _ in range(num_slots)]
        self.obs_space = Counter.observation_space
        self.act_space = Counter.action_space

    def _obs(self) -> np.ndarray:
        return np.array([[c.t, c.pushes] for c in self.slots], np.float32)

    def begin(self) -> np.ndarray:
        for c in self.slots:
            c.t = c.pushes = 0
        return self._obs()

    def advance(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        for c, a in zip(self.slots, actions, strict=True):
            c.t += 1
            c.pushes += int(a)
        return self._obs(), np.asarray(actions, np.float64), np.array([c.t for c in self.slots])

    def close(self) -> None:
        pass


class CounterSampler(FragmentSampler):
    """Its rollout loop: one whole episode of every slot per ``sample()``."""

    def __init__(self, sim: CounterSim, policy: Any, settings: Any) -> None:
        super().__init__(len(sim.slots), settings)
        self.sim, self.policy = sim, policy

    @classmethod
    def from_evaluator(cls, evaluator: PolicyEvaluator) -> CounterSampler:
        sim = evaluator.env_creator(evaluator.env_config)
        return cls(sim, evaluator.policy, evaluator.sampler_settings())

    def _sample_fragment(self) -> SB:
        obs, rows = self.call_env(self.sim, "begin"), []
        eps_id = self.new_episode_ids(self.num_envs)
        for _ in range(EPISODE):
            acted = act(self.policy, obs, self.sim.act_space, explore=self.explore)
            new_obs, rewards, t = self.call_env(self.sim, "advance", acted.env_actions)
            done = t == EPISODE
            rows.append((obs, acted.actions, rewards, new_obs, done, t - 1, acted.extra))
            obs = new_obs
        returns = np.sum([r[2] for r in rows], axis=0)
        self.end_episodes(
            returns, np.full(self.num_envs, EPISODE), np.arange(self.num_envs), lambda i: {}
        )
        trajectories = []
        for i in range(self.num_envs):  # one episode per slot, postprocessed on its own
            batch = SB(
                {
                    SB.OBS: np.stack([r[0][i] for r in rows]),
                    SB.ACTIONS: np.stack([r[1][i] for r in rows]),
                    SB.REWARDS: np.array([r[2][i] for r in rows], np.float32),
                    SB.NEW_OBS: np.stack([r[3][i] for r in rows]),
                    SB.TERMINATEDS: np.array([r[4][i] for r in rows]),
                    SB.TRUNCATEDS: np.zeros(EPISODE, bool),
                    SB.EPS_ID: np.full(EPISODE, eps_id[i]),
                    SB.T: np.array([r[5][i] for r in rows]),
                    # the policy's per-step outputs (value predictions ...)
                    **{k: np.stack([r[6][k][i] for r in rows]) for k in rows[0][6]},
                }
            )
            trajectories.append(self.policy.postprocess_trajectory(batch))
        self.steps_sampled += EPISODE * self.num_envs
        return SB.concat_samples(trajectories)

    def close(self) -> None:
        self.sim.close()


# The one registration: the sampler, the spaces (under the simulator's own names) and
# the envs its state is made of.
register_env_kind(
    EnvKind(
        "CounterSim",
        CounterSim,
        CounterSampler,
        spaces=lambda sim: (sim.obs_space, sim.act_space),
        sub_envs=lambda sim: sim.slots,
    )
)


def _evaluator(num_slots: int = 2) -> PolicyEvaluator:
    config = PGConfig.from_dict({"env": "unused", "model": {"hiddens": (8, 8)}})
    spec = EvaluatorSpec.of(
        lambda cfg: CounterSim(num_slots), PGPolicy, config, rollout_fragment_length=EPISODE
    )
    return PolicyEvaluator(spec)


def test_a_toy_env_kind_registered_here_is_sampled_by_a_policy_evaluator():
    ev = _evaluator(num_slots=2)
    assert ev.env_kind.name == "CounterSim" and not ev.multi_agent
    assert ev.policy.observation_space == Counter.observation_space  # its ``spaces``
    batch = ev.sample()
    assert isinstance(batch, SB) and batch.count == 2 * EPISODE
    assert list(batch[SB.T]) == [0, 1, 2, 0, 1, 2]
    np.testing.assert_array_equal(batch[SB.REWARDS], batch[SB.ACTIONS])  # reward = action
    assert SB.ADVANTAGES in batch  # postprocessed by the evaluator's policy
    episodes = ev.get_metrics()
    assert [e.episode_length for e in episodes] == [EPISODE, EPISODE]
    per_slot = batch[SB.REWARDS].reshape(2, EPISODE).sum(axis=1)
    assert [e.episode_reward for e in episodes] == per_slot.tolist()
    assert len(set(batch[SB.EPS_ID].tolist())) == 2
    ev.stop()


def test_the_toy_kind_state_is_saved_and_restored_through_its_sub_envs():
    sim = CounterSim(2)
    sim.begin()
    sim.advance(np.array([1, 0]))
    snap = snapshot_env(sim)
    assert len(snap["envs"]) == 2  # its ``sub_envs``, one snapshot each
    sim.advance(np.array([1, 1]))
    restore_env(sim, snap)
    assert [(c.t, c.pushes) for c in sim.slots] == [(1, 1), (1, 0)]


def test_a_kind_registers_before_the_kinds_it_specialises_and_clashes_are_named():
    assert env_kind(CounterSim(1)).name == "CounterSim"
    names = [k.name for k in ENV_KINDS]
    assert names.count("CounterSim") == 1
    register_env_kind(next(k for k in ENV_KINDS if k.name == "CounterSim"))  # again: no-op
    assert [k.name for k in ENV_KINDS] == names

    class Special(Counter):
        pass

    special = EnvKind("Special", Special, CounterSampler)
    register_env_kind(special)
    try:
        names = [k.name for k in ENV_KINDS]
        assert names.index("Special") < names.index("gymnasium.Env")
        assert env_kind(Special()) is special
        assert env_kind(Counter()).name == "gymnasium.Env"
        with pytest.raises(ValueError, match=r"'Special'.*clashes with the registered kind"):
            register_env_kind(EnvKind("Special", Counter, CounterSampler))
    finally:
        ENV_KINDS.remove(special)

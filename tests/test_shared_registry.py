"""Envs and models registered in the driver reach the Ray workers of the same job."""

from __future__ import annotations

import gymnasium as gym
import pytest

from hierl.algorithms.pg import PGTrainer
from hierl.evaluators import register_env
from hierl.shared_registry import SharedRegistry


def short_cartpole(config):
    return gym.wrappers.TimeLimit(gym.make("CartPole-v1").unwrapped, config.get("steps", 7))


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_a_registered_env_name_reaches_remote_evaluators(ray_session):
    register_env("short_cartpole_for_remotes", short_cartpole)
    config = {
        "env": "short_cartpole_for_remotes",
        "env_config": {"steps": 7},
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.25,
        "train_batch_size": 140,
    }
    with PGTrainer(config) as trainer:
        result = trainer.train()
    # every episode of the remote evaluators is cut at 7 steps by the registered creator
    assert result["episodes_this_iter"] > 0
    assert result["episode_len_mean"] <= 7


@pytest.mark.ray
def test_a_registry_is_shared_through_the_job_and_lists_its_names(ray_session):
    import ray

    registry = SharedRegistry("test-things")
    registry.register("answer", lambda: 42)

    @ray.remote(num_cpus=0.1)
    def lookup(kind: str) -> tuple[int | None, list[str]]:
        # a fresh registry of the same kind in a worker: nothing local, all from the store
        remote = SharedRegistry(kind)
        found = remote.get("answer")
        return (None if found is None else found()), remote.names()

    assert ray.get(lookup.remote("test-things"), timeout=60) == (42, ["answer"])
    assert ray.get(lookup.remote("other-things"), timeout=60) == (None, [])

"""``auto``: heuristic order (RLlib arXiv appendix C), calibration, switch, state."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hierl.algorithms.pg import PGTrainer
from hierl.algorithms.trainer import Trainer, TrainerConfig
from hierl.config import ConfigError
from hierl.optimizers.auto import AutoConfig, AutoOptimizer
from hierl.optimizers.auto_candidates import initial_order
from hierl.policy_graph import PolicyGraph
from tests.support.learning_runs import SEED, train_until

ALL = ("local", "multi_gpu", "allreduce", "async", "sharded_ps")


ARGS = {
    "num_remote_evaluators": 4,
    "has_gpu": False,
    "num_sgd_iter": 1,
    "sample_bytes": 1_000,
    "model_bytes": 1_000_000,
}


def _order(candidates=ALL, **kw):
    return initial_order(candidates, **{**ARGS, **kw})


def test_heuristics_follow_appendix_c():
    # samples small relative to the model traffic: send samples to the driver
    assert _order()[:2] == ["local", "multi_gpu"]
    # samples large (e.g. images) relative to the model: keep them on the evaluators
    assert _order(sample_bytes=10**9)[:3] == ["allreduce", "async", "sharded_ps"]
    # a GPU on the driver and a multi-pass loss: pin the data on the device
    assert _order(has_gpu=True, num_sgd_iter=10, sample_bytes=10**9)[0] == "multi_gpu"
    # no remote evaluators: driver-side SGD first
    assert _order(num_remote_evaluators=0, sample_bytes=10**9)[0] == "local"
    # only the algorithm's candidates are ordered
    assert _order(["async", "local"]) == ["local", "async"]


def test_calibrates_each_candidate_then_keeps_the_fastest(counting_env):
    config = {
        "env": counting_env,
        "env_config": {"length": 8},
        "optimizer": "auto",
        "optimizer_config": {"candidates": ["local", "async"], "calibration_steps": 2},
        "train_batch_size": 64,
        "num_envs_per_evaluator": 2,
        "rollout_fragment_length": 8,
    }
    with PGTrainer(config) as trainer:
        opt = trainer.optimizer
        assert isinstance(opt, AutoOptimizer)
        assert opt.order == ["local", "async"]
        strategies = []
        for _ in range(6):
            result = trainer.train()
            strategies.append(result["auto_strategy"])
        assert strategies[:4] == ["local", "local", "async", "async"]
        measured = {n: result[f"auto_samples_per_s/{n}"] for n in ("local", "async")}
        assert all(v > 0 for v in measured.values())
        chosen = result["auto_chosen"]
        assert chosen == max(measured, key=measured.get)
        assert strategies[4:] == [chosen, chosen]
        # counters run on across strategies: 6 steps of 64 rows
        assert result["timesteps_total"] == 6 * 64
        state = trainer.get_state()
    assert state["optimizer"]["choice"] == chosen


def test_auto_survives_checkpoint_and_candidates_are_validated(counting_env, tmp_path):
    config = {
        "env": counting_env,
        "optimizer": "auto",
        "optimizer_config": {"candidates": ["local"], "calibration_steps": 1},
        "train_batch_size": 16,
        "num_envs_per_evaluator": 1,
    }
    with PGTrainer(config) as trainer:
        trainer.train()
        trainer.train()
        weights = trainer.get_weights()["default_policy"]
        path = trainer.save(tmp_path / "ckpt")
    with PGTrainer(config) as restored:
        restored.restore(path)
        assert restored.optimizer.choice == "local"
        for k, v in restored.get_weights()["default_policy"].items():
            np.testing.assert_array_equal(v, weights[k])
    with pytest.raises(ConfigError, match="candidates"):
        PGTrainer({**config, "optimizer_config": {"candidates": ["replay"]}})


@pytest.mark.ray
@pytest.mark.learning
@pytest.mark.timeout(300)
def test_auto_over_two_remote_evaluators_calibrates_every_strategy_and_learns(ray_session):
    config = {
        "env": "CartPole-v1",
        "optimizer": "auto",
        "optimizer_config": {"calibration_steps": 2},
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
        "num_envs_per_evaluator": 8,
        "rollout_fragment_length": 25,
        "train_batch_size": 2000,
        "lr": 0.004,
        "seed": SEED,
    }
    strategies = []
    with PGTrainer(config) as trainer:
        opt = trainer.optimizer
        assert sorted(opt.order) == sorted(ALL)  # every strategy PG declares
        run = train_until(
            trainer,
            150,
            60,
            unit="training_iteration",
            ready=lambda r: r["training_iteration"] > 2 * len(ALL),  # calibrated first
            on_result=lambda r: strategies.append(r["auto_strategy"]),
        )
        result = run.result
        # Strategies left behind hold no gradients that could be applied stale later.
        for name in ("async", "sharded_ps"):
            if name != opt.choice:
                assert opt.optimizers[name].stats()["in_flight"] == 0, name
    assert strategies[: 2 * len(ALL)] == [n for n in opt.order for _ in range(2)]
    measured = {n: result[f"auto_samples_per_s/{n}"] for n in ALL}
    assert all(v > 0 for v in measured.values()), measured
    assert result["auto_chosen"] == max(measured, key=measured.get)
    assert result["learn_throughput"] > 0
    assert run.reached, run


class LearnOnlyPolicy(PolicyGraph):
    """Numpy policy with ``learn_on_batch`` only: no gradients, not a TorchPolicyGraph."""

    def __init__(self, observation_space, action_space, config):
        super().__init__(observation_space, action_space, config)
        self.updates = np.zeros(1)

    def compute_actions(self, obs_batch, state_batches=None, explore=True):
        return np.zeros(len(obs_batch), np.int64), [], {}

    def learn_on_batch(self, batch):
        self.updates += 1
        return {"updates": float(self.updates[0])}

    def get_weights(self):
        return {"updates": self.updates.copy()}

    def set_weights(self, weights):
        self.updates = np.array(weights["updates"])


@dataclasses.dataclass
class LearnOnlyConfig(TrainerConfig):
    supported_optimizers = (*ALL, "auto")


class LearnOnlyTrainer(Trainer):
    name = "LEARN_ONLY"
    config_class = LearnOnlyConfig
    policy_class = LearnOnlyPolicy


def test_auto_skips_candidates_that_cannot_train_the_policy_and_says_why(counting_env):
    config = {
        "env": counting_env,
        "optimizer": "auto",
        "optimizer_config": {"calibration_steps": 1},
        "train_batch_size": 16,
    }
    with LearnOnlyTrainer(config) as trainer:
        assert trainer.optimizer.order == ["local"]
        result = trainer.train()
        result = trainer.train()
    assert result["auto_chosen"] == "local"
    assert "TorchPolicyGraph" in result["auto_skipped/multi_gpu"]
    for name in ("allreduce", "async", "sharded_ps"):
        assert "does not implement compute_gradients" in result[f"auto_skipped/{name}"]
    assert "auto_skipped/local" not in result
    # a torch policy runs every candidate: nothing skipped
    with PGTrainer({**config, "optimizer_config": {"candidates": list(ALL)}}) as trainer:
        assert sorted(trainer.optimizer.order) == sorted(ALL)
        assert not any(k.startswith("auto_skipped/") for k in trainer.train())
    # no candidate can train it: refused when the trainer is built, naming each reason
    with pytest.raises(ConfigError, match="'auto' cannot train policy class LearnOnlyPolicy"):
        LearnOnlyTrainer({**config, "optimizer_config": {"candidates": ["async", "multi_gpu"]}})
    assert (
        AutoOptimizer.missing_policy_capability(
            LearnOnlyPolicy, AutoConfig(candidates=("async", "local"))
        )
        is None
    )


def test_trainer_refuses_an_optimizer_that_cannot_train_its_policy(counting_env):
    with pytest.raises(ConfigError) as info:
        LearnOnlyTrainer({"env": counting_env, "optimizer": "sharded_ps"})
    message = str(info.value)
    assert "'sharded_ps'" in message and "LearnOnlyPolicy" in message
    assert "compute_gradients, gradient_names" in message
    assert "that can: local, auto" in message

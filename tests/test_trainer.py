"""Trainer: config validation, results, determinism, checkpoints, custom policies."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from hierl import (
    CheckpointError,
    ConfigError,
    TorchPolicyGraph,
    Trainer,
    get_trainer_class,
)
from hierl.algorithms.pg import PGTrainer
from hierl.algorithms.ppo import PPOTrainer
from tests.support.helpers import RESULT_KEYS
from tests.support.learning_runs import SEED, train_until

pytestmark = pytest.mark.timeout(120)

TINY = {
    "env": "CartPole-v1",
    "train_batch_size": 64,
    "num_envs_per_evaluator": 2,
    "sgd_minibatch_size": 32,
    "num_sgd_iter": 2,
    "model": {"hiddens": [8, 8]},
}


def weights_equal(a, b) -> bool:
    return all(np.array_equal(a[pid][k], b[pid][k]) for pid in a for k in a[pid])


def test_unknown_key_names_it_and_suggests():
    with pytest.raises(ConfigError, match=r"unknown config key 'lrr'.*did you mean 'lr'"):
        PPOTrainer({**TINY, "lrr": 0.1})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("num_evaluators", -1, "num_evaluators.*must be >= 0"),
        ("lr", "fast", "'lr' = 'fast' must be a number"),
        ("batch_mode", "episodes", "valid values: 'truncate_episodes', 'complete_episodes'"),
        ("clip_param", 0, "clip_param"),
        ("model", {"hiddens": [8], "activation": "sigmoid"}, "sigmoid"),
    ],
)
def test_bad_values_are_named(key, value, message):
    with pytest.raises(ConfigError, match=message):
        get_trainer_class("PPO").config_class.from_dict({**TINY, key: value})


@pytest.mark.parametrize("algo", ["SAC", "TD3", "DQN"])
def test_a_partial_model_dict_updates_the_algorithms_model_defaults(algo):
    config_class = get_trainer_class(algo).config_class
    default = config_class().model
    assert default.activation == "relu"  # not ModelConfig's own tanh
    config = config_class.from_dict({"model": {"hiddens": [400, 300]}})
    assert config.model == dataclasses.replace(default, hiddens=(400, 300))
    assert config_class.from_dict({"model": {"fcnet_hiddens": [8]}}).model.hiddens == (8,)
    assert config_class.from_dict(config.to_dict()) == config  # stored configs are whole


def test_unsupported_and_unknown_optimizer_names():
    with pytest.raises(ConfigError, match=r"unknown optimizer 'locl'.*did you mean 'local'"):
        PPOTrainer({**TINY, "optimizer": "locl"})
    # A registered strategy the algorithm does not declare: the valid names are listed.
    supported = PPOTrainer.config_class.supported_optimizers
    assert "apex" not in supported
    valid = ", ".join(supported)
    with pytest.raises(
        ConfigError, match=f"'apex' is not supported by PPOConfig; valid: {valid} "
    ) as info:
        PPOTrainer({**TINY, "optimizer": "apex"})
    # ... and why, and how to allow it
    assert "PPOConfig.supported_optimizers narrows the registered strategies" in str(info.value)
    assert "subclass PPOConfig with supported_optimizers naming it" in str(info.value)


def test_unknown_algorithm_suggests():
    with pytest.raises(ConfigError, match="did you mean 'PPO'"):
        get_trainer_class("PP0")


def test_result_has_standard_keys_and_counts():
    with PPOTrainer(TINY) as t:
        r1 = t.train()
        r2 = t.train()
    assert set(r2) >= RESULT_KEYS
    assert r1["training_iteration"] == 1 and r2["training_iteration"] == 2
    assert r1["timesteps_this_iter"] == 64
    assert r2["timesteps_total"] == 128
    assert any(k.startswith("learner/") for k in r2)
    json.dumps(r2)  # flat and serialisable


def test_same_seed_same_weights_different_seed_different():
    def run(seed):
        with PPOTrainer({**TINY, "seed": seed}) as t:
            t.train()
            t.train()
            return t.get_weights()

    assert weights_equal(run(1), run(1))
    assert not weights_equal(run(1), run(2))


def test_save_restore_roundtrip_and_continue(tmp_path):
    t = PPOTrainer(TINY)
    t.train()
    path = t.save(tmp_path / "ckpt")
    state = t.get_policy().get_state()
    t2 = Trainer.from_checkpoint(path)
    assert type(t2) is PPOTrainer and t2.iteration == 1
    assert t2.optimizer.num_steps_sampled == t.optimizer.num_steps_sampled
    assert weights_equal(t.get_weights(), t2.get_weights())
    state2 = t2.get_policy().get_state()
    for idx, s in state["optimizer"]["state"].items():
        for name, v in s.items():
            np.testing.assert_array_equal(v, state2["optimizer"]["state"][idx][name])
    r = t2.train()
    assert r["training_iteration"] == 2 and r["timesteps_total"] == 128
    t.stop()
    t2.stop()


def test_restore_into_incompatible_policy_is_clear_error(tmp_path):
    with PPOTrainer(TINY) as t:
        path = t.save(tmp_path / "c")
    with (
        PPOTrainer({**TINY, "model": {"hiddens": [16, 16]}}) as other,
        pytest.raises(CheckpointError, match=r"has shape \(8, 4\), the model expects \(16, 4\)"),
    ):
        other.restore(path)
    with PGTrainer({**TINY}) as pg, pytest.raises(CheckpointError, match="'PPO', not 'PG'"):
        pg.restore(path)


def test_corrupt_checkpoint_names_file_and_previous_is_kept(tmp_path):
    with PPOTrainer(TINY) as t:
        good = t.save(tmp_path / "good")
        bad = t.save(tmp_path / "bad")
    (bad / "arrays.npz").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match=r"arrays\.npz.*corrupt"):
        Trainer.from_checkpoint(bad)
    (bad / "checkpoint.json").write_text("{")
    with pytest.raises(CheckpointError, match=r"checkpoint\.json.*corrupt"):
        Trainer.from_checkpoint(bad)
    with pytest.raises(CheckpointError, match="does not exist"):
        Trainer.from_checkpoint(tmp_path / "missing")
    Trainer.from_checkpoint(good).stop()


def test_checkpoint_never_unpickles(tmp_path):
    with PPOTrainer(TINY) as t:
        path = t.save(tmp_path / "c")
    np.savez(path / "arrays.npz", a0=np.array([object()], dtype=object))
    with pytest.raises(CheckpointError, match="corrupt"):
        Trainer.from_checkpoint(path)


def test_compute_single_action_in_action_space():
    with PPOTrainer(TINY) as t:
        action = t.compute_single_action(np.zeros(4, np.float32))
        assert t.get_policy().action_space.contains(int(action))
    with PPOTrainer({**TINY, "env": "Pendulum-v1"}) as t:
        action = t.compute_single_action(np.array([1.0, 0.0, 0.0], np.float32), explore=True)
        assert action.shape == (1,) and -2.0 <= action[0] <= 2.0


# -- a custom algorithm in ~30 lines through the public API --------------------------
def _load_example():
    """examples/custom_policy.py (the README's REINFORCE), imported from its file."""
    path = Path(__file__).resolve().parents[1] / "examples" / "custom_policy.py"
    spec = importlib.util.spec_from_file_location("custom_policy_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.learning
def test_custom_policy_graph_trains_through_public_api():
    torch.manual_seed(0)
    example = _load_example()
    config = {**example.CONFIG, "seed": SEED}
    assert issubclass(example.ReinforcePolicy, TorchPolicyGraph)
    with example.ReinforceTrainer(config) as t:
        first = t.train()
        threshold = max(2 * first["episode_reward_mean"], 60)
        run = train_until(t, threshold, 15, unit="training_iteration")
    assert first["learner/policy_loss"] == pytest.approx(first["learner/total_loss"])
    assert run.reached, run


def test_iteration_stats_are_the_mean_over_its_optimizer_steps():
    from hierl.algorithms.metrics import mean_stats

    steps = [
        {"p0": {"loss": 1.0, "kl": 0.5, "mode": "a"}},
        {"p0": {"loss": 3.0, "mode": "b"}, "p1": {"loss": 5.0}},
        {},
    ]
    assert mean_stats(steps) == {
        "p0": {"loss": 2.0, "kl": 0.5, "mode": "b"},
        "p1": {"loss": 5.0},
    }


def test_logdir_writes_every_result_as_jsonl_csv_and_tensorboard(tmp_path):
    import csv

    from hierl.algorithms.pg import PGTrainer
    from hierl.loggers import read_results, read_scalars

    logdir = tmp_path / "logs"
    config = {"env": "CartPole-v1", "train_batch_size": 200, "logdir": str(logdir)}
    with PGTrainer(config) as trainer:
        results = [trainer.train() for _ in range(3)]
    assert [r["training_iteration"] for r in read_results(logdir)] == [1, 2, 3]
    with open(logdir / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["episode_reward_mean"]) for r in rows] == pytest.approx(
        [r["episode_reward_mean"] for r in results]
    )
    (events,) = logdir.glob("events.out.tfevents.*")
    scalars = read_scalars(events)["ray/tune/episode_reward_mean"]
    assert [step for step, _ in scalars] == [r["timesteps_total"] for r in results]


# -- layout (issue 39): the config, the iteration result and the trainer in their modules --
ALGORITHMS = Path(__file__).resolve().parent.parent / "hierl" / "algorithms"


def test_trainer_config_has_its_own_module_and_the_old_path_still_imports_it():
    from hierl.algorithms import trainer, trainer_config

    assert trainer_config.TrainerConfig.__module__ == "hierl.algorithms.trainer_config"
    assert trainer.TrainerConfig is trainer_config.TrainerConfig


def test_trainer_module_is_small_and_long_functions_say_why():
    import ast

    assert len((ALGORITHMS / "trainer.py").read_text().splitlines()) <= 500
    unexplained = []
    for path in sorted(ALGORITHMS.rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if node.end_lineno - node.lineno + 1 <= 60:
                continue
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if not lines[first - 2].lstrip().startswith("#"):  # a comment says why
                unexplained.append(f"{path.name}:{node.lineno} {node.name}")
    assert unexplained == []


def test_flat_and_nested_trainers_end_their_iteration_through_metrics(monkeypatch):
    from hierl.algorithms import metrics
    from hierl.algorithms.trainer_base import BaseConfig, BaseTrainer

    ended = []
    original = metrics.finish_iteration

    def spy(trainer, result, start=None):
        ended.append(type(trainer).__name__)
        return original(trainer, result, start)

    monkeypatch.setattr(metrics, "finish_iteration", spy)

    class Loop(BaseTrainer):
        config_class = BaseConfig

        def train(self):
            return self.finish_iteration({"x": 1.0}, time.perf_counter())

    nested = Loop({"env": "CartPole-v1"}).train()
    assert nested["training_iteration"] == 1 and nested["time_total_s"] >= 0
    config = {"env": "CartPole-v1", "train_batch_size": 50, "model": {"hiddens": (8,)}}
    with PGTrainer(config) as t:
        flat = [t.train(), t.train()]
    assert ended == ["Loop", "PGTrainer", "PGTrainer"]
    assert [r["training_iteration"] for r in flat] == [1, 2] == [1, t.iteration]
    assert flat[1]["time_total_s"] == pytest.approx(t.time_total_s)
    assert flat[1]["episodes_total"] == t.episodes_total
    keys = list(flat[1])  # the order of the first keys, as progress.csv writes them
    assert keys[:16] == [
        "episode_reward_mean",
        "episode_reward_min",
        "episode_reward_max",
        "episode_len_mean",
        "episodes_this_iter",
        "episodes_total",
        "timesteps_this_iter",
        "timesteps_total",
        "training_iteration",
        "time_this_iter_s",
        "time_total_s",
        "num_steps_trained",
        "sample_throughput",
        "num_evaluators",
        "num_healthy_evaluators",
        "num_evaluator_restarts",
    ]

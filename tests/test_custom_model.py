"""Custom models: ``register_model(name, factory)`` and ``model.custom_model: name`` from a
YAML config; training, exact checkpoints, remote evaluators and clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

import hierl
from hierl.algorithms.dqn import DQNTrainer
from hierl.algorithms.ppo import PPOConfig, PPOTrainer
from hierl.algorithms.trainer_base import BaseTrainer
from hierl.config import ConfigError
from hierl.models import ModelConfig, get_preprocessor, registered_models
from hierl.yaml_loader import load_yaml
from tests.support.counting_env import CountingEnv

MARKER = 42.0


class TinyModel(nn.Module):
    """A shared torso with a buffer that tells this module apart from the default one."""

    def __init__(self, in_size: int, num_outputs: int, width: int):
        super().__init__()
        self.torso = nn.Sequential(nn.Linear(in_size, width), nn.Tanh())
        self.pi = nn.Linear(width, num_outputs)
        self.vf = nn.Linear(width, 1)
        self.register_buffer("marker", torch.tensor(MARKER))
        self.forward_calls = 0

    def forward(self, obs):
        self.forward_calls += 1
        features = self.torso(obs)
        return self.pi(features), self.vf(features).squeeze(-1)


def make_tiny(obs_space, action_space, num_outputs, model_config):
    return TinyModel(
        get_preprocessor(obs_space).size, num_outputs, **model_config.custom_model_config
    )


def make_wrong_shape(obs_space, action_space, num_outputs, model_config):
    return TinyModel(get_preprocessor(obs_space).size, num_outputs + 1, 4)


hierl.register_model("tiny_test_model", make_tiny)
hierl.register_model("wrong_shape_model", make_wrong_shape)

YAML = """
env: CartPole-v1
train_batch_size: 256
sgd_minibatch_size: 64
num_sgd_iter: 2
model:
  custom_model: tiny_test_model
  custom_model_config: {width: 16}
"""


def _config(**changes):
    return {**load_yaml(YAML), **changes}


def _assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for pid in a:
        assert a[pid].keys() == b[pid].keys()
        for name in a[pid]:
            np.testing.assert_array_equal(a[pid][name], b[pid][name])


def test_a_custom_model_named_in_yaml_trains_and_is_the_one_used():
    with PPOTrainer(_config()) as trainer:
        model = trainer.get_policy().model
        assert isinstance(model, TinyModel) and model.pi.out_features == 2
        assert model.torso[0].out_features == 16  # custom_model_config reached the factory
        before = trainer.get_weights()["default_policy"]
        results = [trainer.train() for _ in range(3)]
        after = trainer.get_weights()["default_policy"]
    assert set(before) == {"torso.0.weight", "torso.0.bias", "pi.weight", "pi.bias"} | {
        "vf.weight",
        "vf.bias",
        "marker",
    }
    assert model.forward_calls > 0  # acting and learning went through it
    assert not np.array_equal(before["pi.weight"], after["pi.weight"])
    assert after["marker"] == MARKER
    assert all(np.isfinite(r["learner/total_loss"]) for r in results)
    assert results[-1]["timesteps_total"] == 3 * 256


def test_checkpoint_stores_the_name_and_restores_exact_weights(tmp_path):
    with PPOTrainer(_config()) as trainer:
        trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        weights = trainer.get_weights()
        next_result = trainer.train()
        next_weights = trainer.get_weights()
    stored = json.loads((path / "checkpoint.json").read_text())["config"]["model"]
    assert stored["custom_model"] == "tiny_test_model"
    assert stored["custom_model_config"] == {"width": 16}
    restored = BaseTrainer.from_checkpoint(path)
    try:
        assert isinstance(restored.get_policy().model, TinyModel)
        _assert_same_weights(restored.get_weights(), weights)
        # exact resume: the next iteration is the one the original trainer ran
        again = restored.train()
        assert again["learner/total_loss"] == next_result["learner/total_loss"]
        _assert_same_weights(restored.get_weights(), next_weights)
    finally:
        restored.stop()


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_remote_evaluators_build_the_registered_model(ray_session):
    import ray

    config = _config(num_evaluators=1, num_cpus_per_evaluator=0.5)
    with PPOTrainer(config) as trainer:
        result = trainer.train()
        remote = trainer.evaluators.remote_evaluators[0]
        remote_weights = ray.get(remote.get_weights.remote(), timeout=60)
        kind = ray.get(remote.apply.remote(lambda ev: type(ev.policy.model).__name__), timeout=60)
        local_weights = trainer.get_weights()
    assert result["num_healthy_evaluators"] == 1 and result["timesteps_total"] >= 256
    assert kind == "TinyModel"  # built in the actor's process from the shared registry
    _assert_same_weights(remote_weights, local_weights)  # weights broadcast after learning


def test_a_factory_named_as_module_function_needs_no_registration():
    name = "examples.custom_model:make_layer_norm_model"
    config = PPOConfig.from_dict(
        {"env": CountingEnv, "model": {"custom_model": name, "custom_model_config": {"width": 8}}}
    )
    with PPOTrainer(config) as trainer:
        model = trainer.get_policy().model
    assert type(model).__name__ == "LayerNormActorCritic"
    assert config.to_dict()["model"]["custom_model"] == name


def test_unknown_name_lists_the_registered_models():
    with pytest.raises(ConfigError) as info:
        PPOConfig.from_dict({"env": "CartPole-v1", "model": {"custom_model": "no_such_model"}})
    message = str(info.value)
    assert "'model.custom_model' = 'no_such_model'" in message
    assert "tiny_test_model" in message and "wrong_shape_model" in message
    assert "tiny_test_model" in registered_models()
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_xyz'"):
        ModelConfig(custom_model="no_such_module_xyz:make")


def test_bad_models_and_settings_are_clear():
    with pytest.raises(ValueError, match=r"custom model 'wrong_shape_model'.*\(2, 2\), \(2,\)"):
        PPOTrainer(_config(model={"custom_model": "wrong_shape_model"}))
    with pytest.raises(ConfigError, match="DQN's Q-network is not an actor-critic model"):
        DQNTrainer({"env": "CartPole-v1", "model": {"custom_model": "tiny_test_model"}})
    with pytest.raises(ConfigError, match="must hold JSON values"):
        ModelConfig(custom_model="tiny_test_model", custom_model_config={"f": make_tiny})
    with pytest.raises(ConfigError, match="use_lstm"):
        ModelConfig(custom_model="tiny_test_model", use_lstm=True)
    with pytest.raises(ValueError, match="non-empty string"):
        hierl.register_model("", make_tiny)

"""Names users bring from RLlib: config keys read as hierl's (with a notice) or answered
by meaning, and algorithm names in any case."""

from __future__ import annotations

import logging

import pytest

from hierl.algorithms.dqn import DQNConfig
from hierl.algorithms.ppo import PPOConfig
from hierl.algorithms.registry import canonical_name, get_trainer_class, trainer_names
from hierl.cli import main
from hierl.config import RLLIB_KEYS, ConfigError


def test_rllib_keys_are_read_as_hierl_keys_with_one_notice_each(caplog):
    rllib = {
        "env": "CartPole-v1",
        "num_workers": 2,
        "num_envs_per_worker": 3,
        "lambda": 0.9,
        "num_epochs": 7,
        "minibatch_size": 64,
        "evaluation_duration": 4,
        "model": {"fcnet_hiddens": [32, 32], "fcnet_activation": "relu"},
    }
    with caplog.at_level(logging.WARNING, logger="hierl.config"):
        config = PPOConfig.from_dict(rllib)
    assert (config.num_evaluators, config.num_envs_per_evaluator) == (2, 3)
    assert config.lambda_ == 0.9 and config.evaluation_num_episodes == 4
    assert config.optimizer_config.num_sgd_iter == 7
    assert config.optimizer_config.sgd_minibatch_size == 64
    assert config.model.hiddens == (32, 32) and config.model.activation == "relu"
    notices = [r.getMessage() for r in caplog.records]
    assert len(notices) == 8, notices
    assert "hierl: config key 'num_workers' read as 'num_evaluators'" in notices
    assert "hierl: config key 'model.fcnet_hiddens' read as 'model.hiddens'" in notices
    # the translated config is stored under hierl's names: rebuilding it says nothing
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hierl.config"):
        assert PPOConfig.from_dict(config.to_dict()) == config
    assert not caplog.records


def test_every_rllib_key_names_a_hierl_setting():
    algorithms = [get_trainer_class(n).config_class for n in trainer_names()]
    from dataclasses import fields

    from hierl.models.networks import ModelConfig
    from hierl.optimizers.registry import optimizer_names, optimizer_settings

    known = {f.name for c in algorithms for f in fields(c)} | {f.name for f in fields(ModelConfig)}
    for name in optimizer_names():
        known |= set(optimizer_settings(name))
    assert set(RLLIB_KEYS.values()) <= known, set(RLLIB_KEYS.values()) - known


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"lambda": 0.9}, "'lambda' is RLlib's name for 'lambda_', which this config does not"),
        ({"num_epochs": 3}, "'num_epochs' is RLlib's name for 'num_sgd_iter'"),
        ({"framework": "torch"}, "hierl runs PyTorch only"),
        ({"custom_model": "mine"}, "model.custom_model"),
        ({"num_workers": 1, "num_evaluators": 2}, "give it once, as 'num_evaluators'"),
    ],
)
def test_rllib_keys_without_a_counterpart_are_answered_by_meaning(data, message):
    with pytest.raises(ConfigError, match="^.*" + message.replace("(", r"\(")):
        DQNConfig.from_dict(data)


def test_algorithm_names_in_any_case():
    assert canonical_name("ppo") == "PPO" and canonical_name("apex_ddpg") == "APEX_DDPG"
    assert get_trainer_class("Ppo") is get_trainer_class("PPO")
    with pytest.raises(ConfigError, match=r"unknown algorithm 'ppoo' \(did you mean 'PPO'\?\)"):
        canonical_name("ppoo")


def test_cli_takes_algorithm_names_in_any_case(capsys):
    assert main(["config", "ppo"]) == 0
    assert capsys.readouterr().out.startswith("PPO config keys (PPOConfig)")
    assert main(["train", "--algo", "dqnn", "--env", "CartPole-v1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown algorithm 'dqnn' (did you mean 'DQN'?)" in err[0]

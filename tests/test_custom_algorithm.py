"""The REINFORCE trainer of docs/guide/custom-algorithms.md (``examples/custom_policy.py``)
chooses any strategy by name, with no extra declaration.

Its config is the plain ``TrainerConfig``, which does not narrow ``supported_optimizers``:
every registered strategy is accepted, and the policy's capabilities decide (a strategy
that cannot train the policy class is refused at construction, naming what is missing).
The numpy counterpart is ``tests/test_non_torch_policy.py``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util

import numpy as np
import pytest

from hierl.algorithms.trainer import TrainerConfig
from hierl.config import ConfigError
from hierl.optimizers import get_optimizer_class, optimizer_names
from hierl.optimizers.auto_candidates import gradient_strategies
from tests.support.readme_blocks import REPO, block_containing

EXAMPLE = REPO / "examples" / "custom_policy.py"


def _example_module():
    spec = importlib.util.spec_from_file_location("custom_policy", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _definitions(source: str) -> list[str]:
    """The imports and classes of ``source``, as AST dumps."""
    return [
        ast.dump(node)
        for node in ast.parse(source).body
        if isinstance(node, ast.Import | ast.ImportFrom | ast.ClassDef)
    ]


def test_the_example_is_the_docs_reinforce_statement_for_statement():
    readme = _definitions(block_containing("class ReinforceTrainer(Trainer)").text)
    example = _definitions(EXAMPLE.read_text())
    assert readme and all(node in example for node in readme)


REINFORCE = _example_module()
CONFIG = {"env": "CartPole-v1", "lr": 0.01, "batch_mode": "complete_episodes", "seed": 0}


def _accepted() -> list[str]:
    policy = REINFORCE.ReinforcePolicy
    return [
        n for n in optimizer_names() if not get_optimizer_class(n).missing_policy_capability(policy)
    ]


def test_a_plain_trainer_config_accepts_every_registered_strategy():
    assert TrainerConfig.supported_optimizers is None
    assert TrainerConfig.optimizer_choices() == tuple(optimizer_names())
    # a torch policy graph runs every gradient strategy
    assert set(gradient_strategies()) <= set(_accepted())


@pytest.mark.parametrize("optimizer", optimizer_names())
def test_reinforce_trains_under_every_strategy_its_policy_can_run(optimizer):
    policy = REINFORCE.ReinforcePolicy
    why = get_optimizer_class(optimizer).missing_policy_capability(policy)
    config = {**CONFIG, "optimizer": optimizer, "train_batch_size": 200}
    if why is not None:
        with pytest.raises(ConfigError) as info:
            REINFORCE.ReinforceTrainer(config)
        message = str(info.value)
        assert f"'{optimizer}' cannot train policy class ReinforcePolicy" in message
        assert why in message
        for name in _accepted():
            assert name in message.split("that can: ")[1]
        return
    with REINFORCE.ReinforceTrainer(config) as trainer:
        assert trainer.config.optimizer == optimizer
        before = trainer.get_policy().get_weights()
        for _ in range(10):  # replay strategies first fill their buffer
            result = trainer.train()
            if result["num_steps_trained"]:
                break
        after = trainer.get_policy().get_weights()
    assert result["num_steps_trained"] > 0, result
    assert all(np.isfinite(w).all() for w in after.values())
    changed = [k for k in before if not np.array_equal(before[k], after[k])]
    assert changed, f"no weight moved under {optimizer}"


def test_supported_optimizers_narrows_and_a_refusal_says_how_to_widen():
    choices = gradient_strategies()[:1]

    @dataclasses.dataclass
    class NarrowConfig(TrainerConfig):
        supported_optimizers = choices

    refused = next(n for n in optimizer_names() if n not in choices)
    with pytest.raises(ConfigError) as info:
        NarrowConfig.from_dict({"env": "CartPole-v1", "optimizer": refused})
    message = str(info.value)
    assert f"'optimizer' = '{refused}' is not supported by NarrowConfig" in message
    assert f"valid: {choices[0]}" in message
    assert "subclass NarrowConfig with supported_optimizers naming it" in message
    assert "supported_optimizers = None" in message
    assert (
        TrainerConfig.from_dict({"env": "CartPole-v1", "optimizer": refused}).optimizer == refused
    )

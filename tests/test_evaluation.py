"""Evaluation during training: greedy whole episodes on separate evaluators."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from hierl.algorithms.ppo import PPOTrainer
from hierl.config import ConfigError

PPO = {
    "env": "CartPole-v1",
    "num_envs_per_evaluator": 4,
    "train_batch_size": 256,
    "sgd_minibatch_size": 64,
    "num_sgd_iter": 2,
    "seed": 3,
}
EVAL_KEYS = {
    "evaluation/episode_reward_mean",
    "evaluation/episode_reward_min",
    "evaluation/episode_reward_max",
    "evaluation/episode_len_mean",
    "evaluation/episodes",
}


def _train(config: dict, iterations: int) -> list[dict]:
    trainer = PPOTrainer(config)
    try:
        return [trainer.train() for _ in range(iterations)]
    finally:
        trainer.stop()


def test_evaluation_every_interval_does_not_change_training() -> None:
    plain = _train(PPO, 3)
    evaluated = _train({**PPO, "evaluation_interval": 2, "evaluation_num_episodes": 3}, 3)
    assert [set(r) & EVAL_KEYS for r in evaluated] == [set(), EVAL_KEYS, set()]
    assert evaluated[1]["evaluation/episodes"] == 3
    for a, b in zip(plain, evaluated, strict=True):  # same samples, same updates
        assert a["episode_reward_mean"] == b["episode_reward_mean"]
        assert a["learner/total_loss"] == b["learner/total_loss"]


def test_greedy_evaluation_is_repeatable_and_splits_episodes_over_envs() -> None:
    trainer = PPOTrainer({**PPO, "evaluation_interval": 1, "evaluation_num_episodes": 5})
    try:
        trainer.train()
        first = trainer.evaluation.run(trainer.local_evaluator)
        again = trainer.evaluation.run(trainer.local_evaluator)
        assert first == again  # fresh resets with the same seeds, greedy actions
        evaluator = trainer.evaluation.evaluators.local_evaluator
        records = evaluator.evaluate(5, trainer.get_weights())
        counts = collections.Counter(r.episode_length and r.env_index for r in records)
        assert sorted(counts.values()) == [1, 1, 1, 2]  # sub-env i plays (5 + i) // 4
        assert first["evaluation/episode_reward_mean"] == pytest.approx(
            np.mean([r.episode_reward for r in records])
        )
    finally:
        trainer.stop()


def test_sampling_evaluation_differs_from_greedy_and_both_repeat() -> None:
    config = {**PPO, "evaluation_interval": 1, "evaluation_num_episodes": 4}
    greedy = PPOTrainer(config)
    sampling = PPOTrainer({**config, "evaluation_explore": True})
    try:
        sampling.set_weights(greedy.get_weights())
        a = [greedy.evaluation.run(greedy.local_evaluator) for _ in range(2)]
        b = [sampling.evaluation.run(sampling.local_evaluator) for _ in range(2)]
        # each repeatable (the driver's generators are restored after every evaluation),
        # and sampled actions are not the greedy ones
        assert a[0] == a[1] and b[0] == b[1]
        assert a[0]["evaluation/episode_reward_mean"] != b[0]["evaluation/episode_reward_mean"]
    finally:
        greedy.stop()
        sampling.stop()


@pytest.mark.ray
def test_remote_evaluation_evaluators_play_all_episodes(ray_session) -> None:
    config = {
        **PPO,
        "evaluation_interval": 1,
        "evaluation_num_episodes": 5,
        "evaluation_num_evaluators": 2,
        "num_cpus_per_evaluator": 0.25,
    }
    trainer = PPOTrainer(config)
    try:
        assert len(trainer.evaluation.evaluators.remote_evaluators) == 2
        result = trainer.train()
        assert result["evaluation/episodes"] == 5
        assert result["evaluation/episode_reward_min"] <= result["evaluation/episode_reward_max"]
    finally:
        trainer.stop()


def test_always_attached_results_carry_the_latest_evaluation() -> None:
    config = {**PPO, "evaluation_interval": 2, "evaluation_num_episodes": 2}
    attached = _train({**config, "always_attach_evaluation_results": True}, 5)
    assert all(set(r) >= EVAL_KEYS for r in attached)
    first = attached[0]
    assert first["evaluation/episodes"] == 0
    assert all(np.isnan(first[k]) for k in EVAL_KEYS - {"evaluation/episodes"})
    for fresh, carried in ((1, 2), (3, 4)):
        assert {k: attached[carried][k] for k in EVAL_KEYS} == {
            k: attached[fresh][k] for k in EVAL_KEYS
        }
        assert attached[fresh]["evaluation/episodes"] == 2
    # the same evaluations as without the setting, and training is untouched by it
    plain = _train(config, 5)
    for a, b in zip(plain, attached, strict=True):
        assert a["learner/total_loss"] == b["learner/total_loss"]
        if "evaluation/episode_reward_mean" in a:
            assert a["evaluation/episode_reward_mean"] == b["evaluation/episode_reward_mean"]


def test_a_restored_trainer_attaches_no_evaluation_until_its_next(tmp_path) -> None:
    config = {**PPO, "evaluation_interval": 2, "evaluation_num_episodes": 1}
    trainer = PPOTrainer({**config, "always_attach_evaluation_results": True})
    try:
        results = [trainer.train() for _ in range(2)]
        assert results[-1]["evaluation/episodes"] == 1
        trainer.save(tmp_path / "ckpt")
        trainer.train()
        trainer.restore(tmp_path / "ckpt")
        after = trainer.train()  # iteration 3: no evaluation of its own
        assert after["evaluation/episodes"] == 0 and np.isnan(
            after["evaluation/episode_reward_mean"]
        )
    finally:
        trainer.stop()


def test_replaced_weights_or_a_failed_evaluation_attach_no_stale_metrics(monkeypatch) -> None:
    """Weights or filters copied in (as PPO-ES copies a winner) end the carry; an
    evaluation whose evaluators all failed keeps every key, marked by 0 episodes."""
    config = {**PPO, "evaluation_interval": 2, "evaluation_num_episodes": 1}
    trainer = PPOTrainer({**config, "always_attach_evaluation_results": True})
    try:
        trainer.train()
        for replace in (  # after iteration 2, then 4 (both evaluate)
            lambda: trainer.set_weights(trainer.get_weights()),
            lambda: trainer.set_filters(trainer.get_filters()),
        ):
            assert trainer.train()["evaluation/episodes"] == 1
            replace()
            after = trainer.train()  # an odd iteration: no evaluation of its own
            assert after["evaluation/episodes"] == 0
            assert np.isnan(after["evaluation/episode_reward_mean"])
        trainer.train()  # iteration 6 evaluates
        kept = dict(trainer.evaluation.latest)
        monkeypatch.setattr(trainer.evaluation.evaluators.local_evaluator, "evaluate", _none)
        assert trainer.train()["evaluation/episode_reward_mean"] == kept[REWARD]
        failed = trainer.train()  # iteration 8: every evaluator "failed"
        assert set(failed) >= EVAL_KEYS and failed["evaluation/episodes"] == 0
        assert failed[REWARD] == kept[REWARD]
        assert trainer.evaluation.latest == kept
    finally:
        trainer.stop()


REWARD = "evaluation/episode_reward_mean"


def _none(*args, **kwargs) -> list:
    return []


def test_bad_evaluation_settings_name_the_value() -> None:
    with pytest.raises(ConfigError, match=r"always_attach_evaluation_results.*evaluation_interval"):
        PPOTrainer({**PPO, "always_attach_evaluation_results": True})
    with pytest.raises(ConfigError, match="evaluation_num_episodes"):
        PPOTrainer({**PPO, "evaluation_interval": 1, "evaluation_num_episodes": 0})
    with pytest.raises(ConfigError, match="evaluation_interval"):
        PPOTrainer({**PPO, "evaluation_interval": -1})


def test_each_evaluation_round_resets_to_its_own_start_states(counting_env) -> None:
    config = {
        "env": counting_env,
        "env_config": {"length": 3},
        "num_envs_per_evaluator": 2,
        "evaluation_interval": 1,
        "evaluation_num_episodes": 2,
        "seed": 3,
    }
    trainer = PPOTrainer({**PPO, **config})
    try:
        evaluation = trainer.evaluation
        evaluator = evaluation.evaluators.local_evaluator

        def markers(seed_round: int) -> list[float]:
            """The seed-drawn markers of the episodes the round's sub-envs play last."""
            evaluation.run(trainer.local_evaluator, seed_round=seed_round)
            return evaluator.sampler.obs[:, 1].tolist()

        first, second = markers(1), markers(2)
        assert markers(1) == first and markers(2) == second  # a round repeats exactly
        assert first != second and len(set(first)) == 2  # rounds and sub-envs differ
        assert markers(0) == markers(0) != first
        # training evaluates with its iteration's round, so a resumed run's evaluations
        # play what an unbroken run's would
        trainer.train()
        assert evaluator.sampler.obs[:, 1].tolist() == first
    finally:
        trainer.stop()

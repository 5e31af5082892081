"""PPO-ES / A3C-ES: stock trainers as actors, exact copy + perturbation, improvement."""

from __future__ import annotations

import numpy as np
import pytest

from hierl.algorithms.a2c import A3CTrainer
from hierl.algorithms.population import (
    A3CESTrainer,
    MemberFailureError,
    PPOESTrainer,
    perturbed,
)
from hierl.algorithms.ppo import PPOTrainer
from hierl.algorithms.resources import trainer_bundles
from hierl.algorithms.trainer_base import BaseTrainer
from hierl.config import ConfigError
from hierl.sample_batch import DEFAULT_POLICY_ID
from tests.support.helpers import kill_and_wait
from tests.support.learning_runs import SEED, LearningRun, record

MEMBER = {
    "num_evaluators": 1,
    "num_cpus_per_evaluator": 0.25,
    "num_cpus_for_driver": 0.25,
    "num_envs_per_evaluator": 4,
    "model": {"hiddens": [32]},
}
PPO_MEMBER = {**MEMBER, "train_batch_size": 1000, "sgd_minibatch_size": 250, "num_sgd_iter": 6}


def population_config(**overrides):
    return {
        "env": "CartPole-v1",
        "population_size": 2,
        "round_time_s": 600.0,  # bounded by iterations, not time: deterministic
        "max_member_iterations_per_round": 2,
        "noise_stdev": 0.01,
        "num_cpus_for_driver": 0.0,
        "member_config": PPO_MEMBER,
        **overrides,
    }


def member_class(ray_session, actor) -> type:
    """The hierl class an actor runs (Ray wraps actor classes in a subclass of its own)."""
    mro = ray_session.get(actor.__ray_call__.remote(lambda self: type(self).__mro__), timeout=60)
    return next(c for c in mro if "<locals>" not in c.__qualname__)


def weights_of(trainer, member: int):
    actor = trainer.members[member][0]
    return trainer._get(actor.get_weights.remote())


def assert_weights_equal(a, b) -> None:
    assert a.keys() == b.keys()
    for pid in a:
        assert a[pid].keys() == b[pid].keys()
        for name in a[pid]:
            np.testing.assert_array_equal(a[pid][name], b[pid][name], err_msg=f"{pid}/{name}")


def test_perturbed_adds_seeded_gaussian_noise_in_each_dtype():
    weights = {"default": {"w": np.ones((2, 3), np.float32), "b": np.zeros(3, np.float64)}}
    out = perturbed(weights, 0.5, seed=7)
    rng = np.random.default_rng(7)
    np.testing.assert_array_equal(
        out["default"]["w"], (1 + 0.5 * rng.standard_normal((2, 3))).astype(np.float32)
    )
    np.testing.assert_array_equal(out["default"]["b"], 0.5 * rng.standard_normal(3))
    assert out["default"]["w"].dtype == np.float32
    assert_weights_equal(perturbed(weights, 0.0, seed=1), weights)


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="population_size"):
        PPOESTrainer.config_class.from_dict(population_config(population_size=1))
    with pytest.raises(ConfigError, match="copy_probability"):
        PPOESTrainer.config_class.from_dict(population_config(copy_probability=2.0))
    with pytest.raises(ConfigError, match="max_member_restarts"):
        PPOESTrainer.config_class.from_dict(population_config(max_member_restarts=-1))


def test_populations_of_consecutive_seeds_share_no_member_seed():
    def member_seeds(seed: int) -> set[int]:
        cfg = PPOESTrainer.config_class.from_dict(population_config(seed=seed, population_size=4))
        return {PPOESTrainer._member_dict(cfg, i)["seed"] for i in range(4)}

    assert member_seeds(0) == {0, 1, 2, 3}
    assert member_seeds(1) == {4, 5, 6, 7} and not member_seeds(2) & member_seeds(1)


def test_resources_are_every_members_bundles():
    bundles = trainer_bundles(PPOESTrainer, population_config(num_cpus_for_driver=0.5))
    assert bundles == [{"CPU": 0.5}] + [{"CPU": 0.25}, {"CPU": 0.25}] * 2


ROUNDS = 5
"""Rounds of the PPO-ES learning test (the worst of seeds 0-4 needs 3: tests/LEARNING.md)."""


@pytest.mark.ray
@pytest.mark.learning
@pytest.mark.timeout(300)
def test_ppo_es_improves_and_losers_get_winner_weights_plus_noise(ray_session, tmp_path):
    trainer = PPOESTrainer(population_config(seed=SEED))
    with trainer:
        # the members are the stock classes, unmodified, running as actors
        assert PPOESTrainer.member_class is PPOTrainer
        for actor, _ in trainer.members:
            assert member_class(ray_session, actor) is PPOTrainer
        best = []
        for _ in range(ROUNDS):
            result = trainer.train()
            best.append(result["episode_reward_mean"])
            assert result["population/iterations/0"] == result["population/iterations/1"] == 2
            [copy] = result["population/copies"]  # population 2: one winner, one loser
            assert {copy["winner"], copy["loser"]} == {0, 1}
            assert result["population/best_member"] == copy["winner"]
            winner = weights_of(trainer, copy["winner"])
            expected = perturbed(winner, 0.01, copy["seed"])
            assert_weights_equal(weights_of(trainer, copy["loser"]), expected)
            for pid, policy in winner.items():  # the noise is really there
                for name, w in policy.items():
                    assert not np.array_equal(expected[pid][name], w), name
        assert result["timesteps_total"] == ROUNDS * 2 * 2 * 1000
        # the best member gains 15 over round 1 within ROUNDS rounds (seeds 0-4: in 3)
        gains = [b - best[0] for b in best]
        reached = next((i + 1 for i, g in enumerate(gains) if g >= 15), None)
        record(LearningRun(15, ROUNDS, "training_iteration", reached, max(gains), result))
        assert reached is not None, best

        path = trainer.save(tmp_path / "ckpt")
        saved = [weights_of(trainer, i) for i in range(2)]
    restored = BaseTrainer.from_checkpoint(path)
    with restored:
        assert isinstance(restored, PPOESTrainer) and restored.iteration == ROUNDS
        for i in range(2):
            assert_weights_equal(weights_of(restored, i), saved[i])


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_a3c_es_runs_stock_a3c_members(ray_session):
    config = population_config(
        max_member_iterations_per_round=1,
        member_config={**MEMBER, "train_batch_size": 200},
        noise_stdev=0.05,
    )
    with A3CESTrainer(config) as trainer:
        for actor, _ in trainer.members:
            assert member_class(ray_session, actor) is A3CTrainer
        result = trainer.train()
        assert result["training_iteration"] == 1 and result["timesteps_total"] > 0
        [copy] = result["population/copies"]
        expected = perturbed(weights_of(trainer, copy["winner"]), 0.05, copy["seed"])
        assert_weights_equal(weights_of(trainer, copy["loser"]), expected)


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_ppo_es_nests_in_a_tune_trial_within_its_reservation(ray_session, tmp_path):
    """Tune → PPO_ES → PPO members → their evaluators, all inside one placement group.

    The trial reserves 1.5 of the test Ray's 2 CPUs (0.5 + 2 members x (0.25 + 0.25));
    had each member asked for a reservation of its own (0.5) outside the trial's, the
    second would wait forever for CPUs the trial holds.
    """
    from ray import tune

    from hierl.tune import trainable

    config = population_config(num_cpus_for_driver=0.5, max_member_iterations_per_round=1)
    assert sum(b.get("CPU", 0) for b in trainer_bundles(PPOESTrainer, config)) == 1.5
    tuner = tune.Tuner(
        trainable("PPO_ES"),
        param_space={**config, "noise_stdev": tune.grid_search([0.01])},
        run_config=tune.RunConfig(
            storage_path=str(tmp_path), stop={"training_iteration": 2}, verbose=0
        ),
    )
    results = tuner.fit()
    assert not results.errors
    metrics = results[0].metrics
    assert metrics["training_iteration"] == 2
    assert metrics["population/iterations/0"] == metrics["population/iterations/1"] == 1


def assert_states_equal(a, b, path: str = "state") -> None:
    """Nested dicts / lists of arrays and scalars are exactly equal."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a:
            assert_states_equal(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), path
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_states_equal(x, y, f"{path}/{k}")
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=path)


def kill_member(trainer, index: int) -> None:
    """Kill member ``index``'s actor and wait until Ray reports it dead (a call sent
    right after ``ray.kill`` may still be served)."""
    kill_and_wait(trainer.members[index][0])


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_killed_member_is_recreated_with_the_best_members_complete_state(ray_session):
    member = {**PPO_MEMBER, "train_batch_size": 400, "sgd_minibatch_size": 200}
    config = population_config(
        population_size=3,
        max_member_iterations_per_round=1,
        member_config={**member, "num_sgd_iter": 2},
        max_member_restarts=2,
    )
    with PPOESTrainer(config) as trainer:
        result = trainer.train()
        assert result["population/num_member_restarts"] == 0
        scores = [result[f"population/episode_reward_mean/{i}"] for i in range(3)]
        assert not np.isnan(scores).any()

        # between rounds: kill the round's best member; the first call that reaches it
        # (here a checkpoint's get_state) recreates it from the best survivor
        dead = result["population/best_member"]
        source = max((i for i in range(3) if i != dead), key=lambda i: scores[i])
        old_actor = trainer.members[dead][0]
        kill_member(trainer, dead)
        state = trainer.get_state()
        assert trainer.num_member_restarts == 1 and trainer.members[dead][0] is not old_actor
        assert trainer.member_failures[0][0] == dead
        assert "killed by `ray.kill`" in trainer.member_failures[0][1]
        # weights, Adam moments, filters, counters, rollout position: all the source's
        members = state["members"]
        assert_states_equal(members[str(dead)], members[str(source)])
        assert_weights_equal(weights_of(trainer, dead), weights_of(trainer, source))
        assert state["counters"]["num_member_restarts"] == 1

        # during a round: the dead member's train() fails, it is recreated, rejoins
        result = trainer.train()
        assert result["population/num_member_restarts"] == 1
        kill_member(trainer, 1)
        result = trainer.train()
        assert result["population/num_member_restarts"] == 2
        assert [result[f"population/iterations/{i}"] for i in range(3)] == [1, 1, 1]
        assert result["timesteps_total"] == 3 * 3 * 400  # 3 rounds x 3 members x 400
        assert result["training_iteration"] == 3
        assert len(result["population/copies"]) == 1

        # the restart budget is spent: the next failure ends training, naming the member
        kill_member(trainer, 2)
        with pytest.raises(MemberFailureError, match=r"member 2 .*max_member_restarts=2 .*2 made"):
            trainer.train()


def test_errors_other_than_member_failures_propagate_unchanged():
    trainer = PPOESTrainer.__new__(PPOESTrainer)  # no members needed: nothing is recreated
    trainer.member_failures = []
    error = ValueError("non-finite loss")
    with pytest.raises(ValueError, match="non-finite loss") as raised:
        trainer._recover(0, error)
    assert raised.value is error and trainer.member_failures == []


def filters_of(trainer, member: int):
    return trainer._get(trainer.members[member][0].get_filters.remote())


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_losers_copy_winner_filters_and_rounds_report_the_best_members_evaluation(ray_session):
    # members sample in their drivers with MeanStdFilter; the loser copies the winner
    # exactly (no noise): the same weights under the same filter compute the same function
    member = {
        "num_evaluators": 0,
        "num_cpus_for_driver": 0.25,
        "train_batch_size": 200,
        "sgd_minibatch_size": 100,
        "num_sgd_iter": 1,
        "model": {"hiddens": [8]},
        "observation_filter": "MeanStdFilter",
        "evaluation_interval": 2,
        "evaluation_num_episodes": 1,
    }
    config = population_config(
        seed=SEED, member_config=member, noise_stdev=0.0, max_member_iterations_per_round=1
    )
    with PPOESTrainer(config) as trainer:
        first = trainer.train()  # member iteration 1: no evaluation yet
        assert not any(k.startswith("evaluation/") for k in first)
        second = trainer.train()  # member iteration 2: every member evaluated
        [copy] = second["population/copies"]
        winner, loser = filters_of(trainer, copy["winner"]), filters_of(trainer, copy["loser"])
        rs_winner, rs_loser = winner[DEFAULT_POLICY_ID]["rs"], loser[DEFAULT_POLICY_ID]["rs"]
        assert rs_winner["n"] > 0 and rs_loser["n"] == rs_winner["n"]
        for key in ("mean", "m2"):
            np.testing.assert_array_equal(rs_loser[key], rs_winner[key], err_msg=key)
        assert_weights_equal(
            weights_of(trainer, copy["loser"]), weights_of(trainer, copy["winner"])
        )
        best = second["population/best_member"]
        assert (
            second["evaluation/episode_reward_mean"]
            == (second[f"population/evaluation_reward_mean/{best}"])
        )
        assert second["evaluation/episodes"] == 1
        assert second["population/bytes_copied"] > 0

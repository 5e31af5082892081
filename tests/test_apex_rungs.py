"""Ape-X's per-rung training returns (``hierl.optimizers.apex.rungs``): the windows, the
result keys of a trainer in-process and with remote evaluators, and checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hierl.algorithms.dqn import ApexTrainer
from hierl.checkpoint import CheckpointError
from hierl.evaluators import EpisodeRecord
from hierl.optimizers.apex.rungs import RungReturns
from tests.support.helpers import train_until_done


def _episodes(*returns: float) -> list[EpisodeRecord]:
    return [EpisodeRecord(episode_reward=r, episode_length=1, env_index=0) for r in returns]


def test_each_rung_keeps_the_mean_of_its_last_window_episodes():
    rungs = RungReturns(window=3)
    rungs.add(1, _episodes(1.0, 2.0))
    rungs.add(2, _episodes(10.0))
    rungs.add(1, _episodes(3.0, 4.0))  # rung 1's window: 2, 3, 4
    out = rungs.metrics([0.4, 0.4**8, 0.01])
    assert out["rung_1/episode_reward_mean"] == 3.0 and out["rung_1/episodes_total"] == 4
    assert out["rung_2/episode_reward_mean"] == 10.0 and out["rung_2/episodes_total"] == 1
    assert math.isnan(out["rung_3/episode_reward_mean"]) and out["rung_3/episodes_total"] == 0
    assert [out[f"rung_{i}/epsilon"] for i in (1, 2, 3)] == [0.4, 0.4**8, 0.01]
    with pytest.raises(ValueError, match="window must be >= 1"):
        RungReturns(window=0)


def test_state_round_trips_and_a_hostile_state_is_refused():
    rungs = RungReturns(window=2)
    rungs.add(1, _episodes(1.0, 2.0, 3.0))
    rungs.add(2, _episodes(-5.0))
    again = RungReturns(window=2)
    again.set_state(rungs.get_state())
    assert again.metrics([0.4, 0.1]) == rungs.metrics([0.4, 0.1])
    again.add(1, _episodes(7.0))  # the restored window still drops its oldest return
    assert again.metrics([0.4])["rung_1/episode_reward_mean"] == 5.0
    good = rungs.get_state()
    bad_states = [
        ({"returns": {"0": np.zeros(2)}}, "numbered 1, 2"),
        ({"returns": {"one": np.zeros(2)}}, "numbered 1, 2"),
        ({"returns": {"1": np.zeros((2, 2))}}, "1-D array of numbers"),
        ({"returns": {"1": np.array(["a"])}}, "1-D array of numbers"),
        ({"totals": {"1": -1}}, "integer >= 0"),
        ({"totals": {"1": True}}, "integer >= 0"),
        ({"totals": {"1": 2.5}}, "integer >= 0"),
    ]
    for state, message in bad_states:
        with pytest.raises(ValueError, match=message):
            again.set_state(state)
    again.set_state(good)  # a refused state left nothing half-loaded behind it
    assert again.metrics([0.4, 0.1]) == rungs.metrics([0.4, 0.1])


def _local_config() -> dict:
    return {
        "env": "CartPole-v1",
        "model": {"hiddens": [8], "activation": "relu"},
        "learning_starts": 64,
        "train_batch_size": 16,
        "min_step_time_s": 0.1,
        "timesteps_per_iteration": 256,
    }


def test_in_process_the_local_evaluator_is_rung_1_and_its_window_is_the_trainer_s():
    with ApexTrainer(_local_config()) as trainer:
        result = train_until_done(trainer, lambda r: r["episodes_total"] >= 20)
    # every episode was the local evaluator's, at the ladder's one rung; both windows
    # hold the last 100 episodes, so the two means are the same number
    assert result["rung_1/epsilon"] == pytest.approx(0.4)
    assert result["rung_1/episodes_total"] == result["episodes_total"] >= 20
    assert result["rung_1/episode_reward_mean"] == result["episode_reward_mean"]
    assert "rung_2/episode_reward_mean" not in result


def test_a_checkpoint_keeps_the_rungs_and_a_corrupt_one_is_refused(tmp_path):
    with ApexTrainer(_local_config()) as trainer:
        result = train_until_done(trainer, lambda r: r["episodes_total"] >= 5)
        path = trainer.save(tmp_path / "apex")
        state = trainer.get_state()
    with ApexTrainer(_local_config()) as again:
        again.restore(path)
        kept = again.optimizer.rungs.metrics(again.optimizer.epsilons)
        assert kept["rung_1/episodes_total"] == result["rung_1/episodes_total"]
        assert kept["rung_1/episode_reward_mean"] == result["rung_1/episode_reward_mean"]
        state["optimizer"]["rungs"]["totals"] = {"1": -3}
        with pytest.raises(CheckpointError, match="episodes_total must be an integer"):
            again.set_state(state)


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_with_remote_evaluators_each_rung_counts_its_own_episodes(ray_session):
    config = {
        **_local_config(),
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
        "sample_timeout_s": 120,
    }
    with ApexTrainer(config) as trainer:
        result = train_until_done(
            trainer, lambda r: r["rung_1/episodes_total"] and r["rung_2/episodes_total"]
        )
    assert result["rung_1/epsilon"] == pytest.approx(0.4)
    assert result["rung_2/epsilon"] == pytest.approx(0.4**8)
    # the local evaluator samples nothing here: the rungs' episodes are all the episodes
    total = result["rung_1/episodes_total"] + result["rung_2/episodes_total"]
    assert total == result["episodes_total"]
    assert result["rung_1/episodes_total"] > 0 and result["rung_2/episodes_total"] > 0

"""Bounded memory (soak): long ``apex``, ``async`` and ``aso`` runs keep the driver and the
store flat.

Each run trains on CartPole-v1 (observations zero-padded to 1024 floats, so sample
batches, replay batches, weights and gradients exceed Ray's 100 KiB inline limit and
really go through the object store) with 2 remote evaluators, and samples after every
``train()`` the driver's RSS, its private part (RSS minus shared pages), the object
store's usage, the object refs the driver tracks and the private memory of the actor
processes (evaluators, replay shards) (``benchmarks/soak.py``).  The first
third is warm-up (the small replay buffer fills in it); the max over the last third may
exceed the max over the middle third by at most ``LIMITS``.  Every in-flight structure
is bounded by config, so the store and ref counts cannot drift at all; the limits sit
far above the measured noise and the theoretical in-flight maxima, and far below what
one leaked object per task would add (``test_soak_check_catches_a_leaked_batch_ref``
shows the check failing on such a leak).  Run with ``-s`` to see the measured growth.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"

LIMITS = {
    "rss_mib": 24.0,
    "private_mib": 16.0,
    "store_mib": 8.0,
    "driver_refs": 32.0,
    "actors_mib": 32.0,
}
"""Most growth (max over the last third - max over the middle third) a soak may show.

Measured (2-core machine, 6k-30k env steps): at most +2.2 MiB RSS, +1.2 MiB private,
+0.4 MiB store (its level stays within 0-3.2 MiB: the batches in flight), +5 refs (the
level moves within 14-30 for apex, is 2 for async), +0.7 MiB over the evaluator and
replay-shard processes.  The in-flight bounds cap the store at ~6 MiB and the refs at
~50 whatever the timing; a leak of one 130 KiB sample batch per apex sample task adds
~16 MiB and ~125 refs per third.
"""

APEX_STEPS = 6000
A3C_STEPS = 4500
IMPALA_STEPS = 6000


@pytest.fixture(scope="module")
def soak():
    """``benchmarks/soak.py`` as a module (its env creator shipped to Ray by value)."""
    sys.path.insert(0, str(BENCH))
    try:
        module = importlib.import_module("soak")
        from ray import cloudpickle

        cloudpickle.register_pickle_by_value(module)  # padded_cartpole, for the evaluators
        yield module
    finally:
        sys.path.remove(str(BENCH))


def _soak(soak: Any, name: str, steps: int, config: dict, leak=None) -> tuple[dict, dict]:
    """Soak trainer ``name`` (``leak(trainer)`` first, if given); its growth and stats."""
    _, growth = soak.soak(name, steps, config, prepare=leak)
    print("\n" + soak.describe(name, growth))
    return growth, growth["optimizer_stats"]


def _over_limits(growth: dict) -> dict[str, float]:
    """The metrics whose growth exceeds ``LIMITS`` (empty: flat)."""
    return {m: growth[f"{m}_growth"] for m, lim in LIMITS.items() if growth[f"{m}_growth"] > lim}


# -- the growth criterion itself -------------------------------------------------------
def test_growth_criterion_flags_a_steady_leak_but_not_bounded_noise(soak):
    rng = np.random.default_rng(0)

    def series(leak_per_step: float) -> list:
        out = []
        for i in range(1, 61):  # 60 samples, 100 env steps apart
            noise = float(rng.uniform(0, 3))  # a bounded in-flight level, as measured
            level = 100 + noise + leak_per_step * 100 * i
            out.append(soak.MemorySample(100 * i, level, level, noise, int(20 + noise)))
        return out

    flat = soak.growth(series(0.0))
    assert flat["steps"] == 6000 and flat["samples"] == 60
    assert flat["middle_from_steps"] == 2100 and flat["last_from_steps"] == 4100
    assert abs(flat["rss_mib_growth"]) <= 3 and abs(flat["rss_mib_per_1k"]) < 0.5
    assert _over_limits(flat) == {}
    # 16 kB per env step over 2000 steps a third: 32 MB more at the last third's max.
    leaky = soak.growth(series(0.016))
    assert 32 - 3 <= leaky["rss_mib_growth"] <= 32 + 3
    assert leaky["rss_mib_per_1k"] == pytest.approx(16, abs=0.5)
    assert set(_over_limits(leaky)) == {"rss_mib", "private_mib"}
    with pytest.raises(ValueError, match="at least 6 samples"):
        soak.growth(series(0.0)[:5])
    # No sample falls in the middle third of the steps: the thirds are taken by count.
    uneven = series(0.0)[:6]
    uneven[-1].steps = 6000
    split = soak.growth(uneven)
    assert (split["middle_from_steps"], split["last_from_steps"]) == (300, 500)


# -- soaks -----------------------------------------------------------------------------
@pytest.mark.ray
@pytest.mark.timeout(240)
def test_apex_soak_driver_and_object_store_stay_flat(ray_session, soak):
    config = soak.apex_config(obs_size=1024, buffer_size=1000)
    growth, stats = _soak(soak, "APEX", APEX_STEPS, config)
    # The replay buffer (2 shards x 500 rows) is full within the warm-up third.
    assert growth["middle_from_steps"] > config["buffer_size"]
    assert stats["replay_buffer_size"] == config["buffer_size"]
    assert stats["num_steps_sampled"] >= APEX_STEPS and stats["num_samples_dropped"] == 0
    assert stats["num_learner_updates"] > 0 and stats["num_weight_syncs"] > 0
    assert _over_limits(growth) == {}, growth


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_async_soak_driver_and_object_store_stay_flat(ray_session, soak):
    growth, stats = _soak(soak, "A3C", A3C_STEPS, soak.a3c_config(obs_size=1024))
    assert stats["num_gradients_applied"] >= A3C_STEPS // 10  # a task per 10 env steps
    assert stats["num_weight_syncs"] == stats["num_gradients_applied"]
    assert stats["in_flight"] <= 2  # max_in_flight_per_evaluator=1, two evaluators
    assert _over_limits(growth) == {}, growth


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_aso_soak_driver_and_object_store_stay_flat(ray_session, soak):
    growth, stats = _soak(soak, "IMPALA", IMPALA_STEPS, soak.impala_config(obs_size=1024))
    assert stats["num_learner_updates"] > 0 and stats["num_weight_syncs"] > 0
    assert stats["sample_requests_in_flight"] <= 2 * 2
    assert stats["batches_waiting_for_learner"] <= 4  # learner_queue_size
    assert _over_limits(growth) == {}, growth


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_soak_check_catches_a_leaked_batch_ref(ray_session, soak):
    # The apex soak with one bug planted: the driver keeps every sample batch's ref after
    # handing it to a replay shard.  The check must fail on refs and on store memory.
    kept: list = []

    def leak(trainer: Any) -> None:
        replay = trainer.optimizer.replay
        submit = replay.submit

        def leaky_submit(ticket, batch_ref, *rest):
            kept.append(batch_ref)
            submit(ticket, batch_ref, *rest)

        replay.submit = leaky_submit

    growth, _ = _soak(soak, "APEX", APEX_STEPS, soak.apex_config(obs_size=1024), leak=leak)
    per_third = len(kept) / 3
    assert per_third > 100
    assert growth["driver_refs_growth"] > max(LIMITS["driver_refs"], per_third / 2)
    assert growth["store_mib_growth"] > LIMITS["store_mib"]
    kept.clear()

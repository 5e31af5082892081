"""What PPO-ES's nesting costs: its rounds against the same members trained independently.

    python benchmarks/nesting_overhead.py --population 4 --iterations 5 --pairs 8

One PPO-ES trainer (``population`` CartPole PPO members, each sampling in its own Ray
actor as in ``examples/tuned/walker2d-ppo-es.yaml``); after a warm-up round the same member
actors train in ``--pairs`` pairs of, in alternating order:

- *nested*: one ES round of ``iterations`` ``train()`` calls per member (the round's
  barrier: every member waits for the slowest; then ranking and the exploit copies);
- *independent*: ``iterations`` ``train()`` calls per member, each member's next call sent
  as its last returns, no round, no copies (the same actors and configs).

Reports the overhead ``1 - independent / nested`` over all pairs (and the median pair's),
per round the time between rounds (from the last member's result to the end of
``train()``: ranking and the copies), the members' mean idle time at the round's barrier,
the driver's CPU seconds and the bytes copied (weights and filter statistics; each crosses
the wire twice, winner to driver to loser), each also as a share of the rounds'
wall-clock.  Writes ``benchmarks/results/nesting_overhead.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from common import CpuMeter, process_tree, record

from hierl.algorithms.population import PPOESTrainer

MEMBER = {
    "num_evaluators": 0,
    "num_cpus_for_driver": 0.5,
    "num_envs_per_evaluator": 1,
    "rollout_fragment_length": 500,
    "train_batch_size": 500,
    "sgd_minibatch_size": 125,
    "num_sgd_iter": 5,
    "model": {"hiddens": [64, 64]},
    "observation_filter": "MeanStdFilter",
}
"""CartPole PPO members, sampling in their own actor (walker2d-ppo-es.yaml's layout)."""


class RoundClock:
    """Wraps a PopulationTrainer's ``_next_result`` and ``_copy_member`` to time a round:
    when each member's last result arrived, and how long the copies took."""

    def __init__(self, trainer: PPOESTrainer):
        self.arrivals: dict[int, float] = {}
        self.copy_s = 0.0
        next_result, copy_member = trainer._next_result, trainer._copy_member

        def timed_next(pending: dict[Any, int]) -> tuple[int, Any]:
            index, result = next_result(pending)
            self.arrivals[index] = time.perf_counter()
            return index, result

        def timed_copy(*args: Any) -> int:
            t = time.perf_counter()
            try:
                return copy_member(*args)
            finally:
                self.copy_s += time.perf_counter() - t

        trainer._next_result, trainer._copy_member = timed_next, timed_copy

    def reset(self) -> None:
        self.arrivals, self.copy_s = {}, 0.0


def nested_block(trainer: PPOESTrainer, clock: RoundClock, rounds: int) -> dict[str, Any]:
    """``rounds`` ES rounds: wall-clock, driver CPU and the per-round figures."""
    per_round = []
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        clock.reset()
        result = trainer.train()
        end = time.perf_counter()
        last = max(clock.arrivals.values())
        per_round.append(
            {
                "between_rounds_s": end - last,
                "copy_s": clock.copy_s,
                "barrier_idle_s": statistics.mean(last - t for t in clock.arrivals.values()),
                "bytes_copied": result["population/bytes_copied"],
            }
        )
    return {
        "wall_s": time.perf_counter() - t0,
        "driver_cpu_s": time.process_time() - cpu0,
        "rounds": per_round,
    }


def independent_block(trainer: PPOESTrainer, iterations: int) -> dict[str, Any]:
    """``iterations`` ``train()`` calls on every member actor, no rounds: wall-clock."""
    import ray

    actors = [actor for actor, _ in trainer.members]
    done = [0] * len(actors)
    cpu0, t0 = time.process_time(), time.perf_counter()
    pending = {actor.train.remote(): i for i, actor in enumerate(actors)}
    while pending:
        [ref], _ = ray.wait(list(pending))
        i = pending.pop(ref)
        ray.get(ref)
        done[i] += 1
        if done[i] < iterations:
            pending[actors[i].train.remote()] = i
    return {"wall_s": time.perf_counter() - t0, "driver_cpu_s": time.process_time() - cpu0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--population", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=5, help="train() per member a round")
    parser.add_argument("--pairs", type=int, default=8, help="(ES round, independent block) pairs")
    args = parser.parse_args()
    config = {
        "env": "CartPole-v1",
        "population_size": args.population,
        "max_member_iterations_per_round": args.iterations,
        "round_time_s": 1e6,
        "member_config": MEMBER,
    }
    pairs: list[dict[str, Any]] = []
    with PPOESTrainer(config) as trainer:
        clock = RoundClock(trainer)
        trainer.train()  # warm-up: actors, torch, envs
        meter = CpuMeter({"ours": process_tree()})
        with meter:
            for k in range(args.pairs):
                # CRUCIAL: the load of a shared machine drifts; alternating which kind goes
                # first and pairing each round with its neighbour cancels most of it
                if k % 2 == 0:
                    nested = nested_block(trainer, clock, 1)
                    independent = independent_block(trainer, args.iterations)
                else:
                    independent = independent_block(trainer, args.iterations)
                    nested = nested_block(trainer, clock, 1)
                [one] = nested["rounds"]
                pair = {**one, "nested_s": nested["wall_s"], "independent_s": independent["wall_s"]}
                pair["driver_cpu_s"] = nested["driver_cpu_s"]
                pairs.append(pair)
                print(
                    f"pair {k}: round {pair['nested_s']:.2f} s, independent "
                    f"{pair['independent_s']:.2f} s; between rounds {one['between_rounds_s']:.3f} s"
                    f" (copies {one['copy_s']:.3f} s), barrier idle {one['barrier_idle_s']:.2f} s, "
                    f"{one['bytes_copied']:,} bytes copied, "
                    f"driver CPU {pair['driver_cpu_s']:.2f} s",
                    flush=True,
                )
    nested_s = sum(p["nested_s"] for p in pairs)
    figures = {
        "pairs": pairs,
        "nested_s": nested_s,
        "independent_s": sum(p["independent_s"] for p in pairs),
        "overhead": 1 - sum(p["independent_s"] for p in pairs) / nested_s,
        "overhead_median": statistics.median(1 - p["independent_s"] / p["nested_s"] for p in pairs),
        "between_rounds_share": sum(p["between_rounds_s"] for p in pairs) / nested_s,
        "barrier_idle_share": sum(p["barrier_idle_s"] for p in pairs) / nested_s,
        "driver_cpu_share": sum(p["driver_cpu_s"] for p in pairs) / nested_s,
        "bytes_copied_per_round": pairs[0]["bytes_copied"],
        "cores": meter.cores,
        "load_average": os.getloadavg(),
    }
    print(
        f"overhead {100 * figures['overhead']:+.1f}% of the rounds' wall-clock (median pair "
        f"{100 * figures['overhead_median']:+.1f}%); between rounds "
        f"{100 * figures['between_rounds_share']:.2f}%, barrier idle (mean member) "
        f"{100 * figures['barrier_idle_share']:.1f}%, driver CPU "
        f"{100 * figures['driver_cpu_share']:.2f}%; {meter.describe()}; load average "
        f"{figures['load_average']}"
    )
    print(f"wrote {record('nesting_overhead', {**config, **vars(args)}, figures)}")


if __name__ == "__main__":
    main()

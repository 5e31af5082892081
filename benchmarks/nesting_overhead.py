"""What PPO-ES's nesting costs: its rounds against the same members trained independently.

    python benchmarks/nesting_overhead.py --population 4 --rounds 4 --iterations 5

One PPO-ES trainer (``population`` CartPole PPO members, each sampling in its own Ray
actor as in ``examples/tuned/walker2d-ppo-es.yaml``); after a warm-up round the same member
actors train in alternating blocks, ``--repeats`` times each:

- *nested*: ``rounds`` ES rounds of ``iterations`` ``train()`` calls per member (the
  round's barrier: every member waits for the slowest; then ranking and the exploit copies);
- *independent*: ``rounds * iterations`` ``train()`` calls per member, each member's next
  call sent as its last returns, no rounds, no copies (the same actors and configs).

Reports per block the wall-clock, the overhead ``(nested - independent) / nested``, the
driver's CPU seconds, per round the time between rounds (from the last member's result to
the end of ``train()``: ranking and the copies), the members' mean idle time at the
round's barrier, and the bytes copied (weights and filter statistics; each crosses the wire
twice, winner to driver to loser).  Writes ``benchmarks/results/nesting_overhead.json``.
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--rounds", type=int, default=4, help="ES rounds per nested block")
    parser.add_argument("--iterations", type=int, default=5, help="train() per member a round")
    parser.add_argument("--repeats", type=int, default=2, help="blocks of each kind")
    args = parser.parse_args()
    config = {
        "env": "CartPole-v1",
        "population_size": args.population,
        "max_member_iterations_per_round": args.iterations,
        "round_time_s": 1e6,
        "member_config": MEMBER,
    }
    blocks: list[dict[str, Any]] = []
    with PPOESTrainer(config) as trainer:
        clock = RoundClock(trainer)
        trainer.train()  # warm-up: actors, torch, envs
        meter = CpuMeter({"ours": process_tree()})
        with meter:
            for repeat in range(args.repeats):
                nested = nested_block(trainer, clock, args.rounds)
                independent = independent_block(trainer, args.rounds * args.iterations)
                overhead = (nested["wall_s"] - independent["wall_s"]) / nested["wall_s"]
                blocks.append({"nested": nested, "independent": independent, "overhead": overhead})
                rounds = nested["rounds"]
                print(
                    f"block {repeat}: nested {nested['wall_s']:.1f} s, independent "
                    f"{independent['wall_s']:.1f} s, overhead {100 * overhead:+.1f}%; per round: "
                    f"between rounds {statistics.mean(r['between_rounds_s'] for r in rounds):.3f} s"
                    f" (copies {statistics.mean(r['copy_s'] for r in rounds):.3f} s), barrier "
                    f"idle {statistics.mean(r['barrier_idle_s'] for r in rounds):.2f} s, "
                    f"{rounds[0]['bytes_copied']:,} bytes copied; driver CPU "
                    f"{nested['driver_cpu_s']:.2f} s nested, "
                    f"{independent['driver_cpu_s']:.2f} s independent",
                    flush=True,
                )
    figures = {
        "blocks": blocks,
        "overhead_median": statistics.median(b["overhead"] for b in blocks),
        "cores": meter.cores,
    }
    print(f"median overhead {100 * figures['overhead_median']:+.1f}%; {meter.describe()}")
    print(f"wrote {record('nesting_overhead', {**config, **vars(args)}, figures)}")


if __name__ == "__main__":
    main()

"""ALPHAZERO: the AlphaGo Zero loop as logically centralized control over actors.

AlphaGo Zero (Silver et al., Nature 2017); RLlib (Liang et al., ICML 2018, §3.4 and
arXiv:1712.09381v1 appendix E.3, whose ~70-line event loop this follows).

Components (Ray actors; in-process objects when ``num_self_play_workers=0``):

* ``num_self_play_workers`` ``.components.SelfPlayEvaluator`` s always play the
  current **best** model against itself (MCTS + Dirichlet noise + temperature) and
  push whole games to
* one **shared replay buffer** actor (``hierl.optimizers.replay.buffer.ReplayBuffer``),
  from which
* ``num_learners`` ``.components.AlphaZeroLearner`` s pull batches and train
  candidates (starting from the best, continuing their own line until a new best);
* every finished training round is a candidate; ``.components.Arena`` actors play
  it against the best for ``arena_games`` games (half with each colour), and the
  **gate** makes it the new best when its score ``(wins + draws/2) / games`` is
  ``>= gate_threshold`` (0.55, AlphaGo Zero's "55% of the games"; Go has no draws,
  here a draw counts half as in chess Elo).  The new best's weights are broadcast to
  every self-play evaluator and learner; comparisons still running against the old
  best are discarded, as in the paper's pseudocode.  With ``gate: false`` (AlphaZero,
  Silver et al., Science 2018) there is no comparison: every finished training round
  is the new best at once, and the arenas only estimate strength.

``train()`` is an event loop over ``ray.wait`` across all outstanding tasks (self-play,
training rounds, comparisons).  It runs for ``time_budget_s`` seconds or until
``train_rounds_per_iter`` training rounds finished (whichever comes first; the count
bound makes tests reproducible in size), then measures the best model's strength
against a fixed opponent (``strength_opponent``) while the loop keeps routing results,
and returns.  ``episode_reward_mean`` is that strength score in [0, 1] (1 = won every
game, 0.5 = all draws; for Tic-Tac-Toe against perfect minimax, 0.5 is perfect play).

Fault tolerance (Ray only; in-process every error propagates): a task that fails because
an actor died (killed, crashed, node lost) or a self-play env raised makes the loop
recreate that actor in place, same role, index and options (see ``_on_task_failure``):

* a self-play evaluator or learner gets the current best weights before any new task
  (a recreated learner's line restarts from the best; its queued candidate is dropped);
* a recreated replay buffer starts **empty**: the learners wait for ``learning_starts``
  new positions while self-play games keep arriving;
* a comparison lost with its arena actor is re-queued (unless the best changed or the
  same learner has a newer candidate); a lost strength estimate is replayed, same seed;
* the dead actor's other in-flight tasks are dropped from the loop and their work is
  re-queued (self-play continues, learners and arenas become free again).

Results count ``num_actor_restarts`` and ``actor_restarts/<role>``; more than
``max_actor_restarts`` in all ends training with EvaluatorFailureError.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hierl.algorithms.alphazero.components import (
    AlphaZeroLearner,
    Arena,
    ArenaResult,
    SelfPlayEvaluator,
)
from hierl.algorithms.alphazero.config import AlphaZeroConfig
from hierl.algorithms.alphazero.games import TicTacToe
from hierl.algorithms.alphazero.player import AlphaZeroPlayer
from hierl.algorithms.alphazero.policy import AlphaZeroPolicy, game_for_config
from hierl.algorithms.alphazero.runtime import Runtime
from hierl.algorithms.trainer_base import BaseTrainer
from hierl.checkpoint import CheckpointError
from hierl.evaluators.env import env_spaces, resolve_env_creator
from hierl.evaluators.evaluator_set import (
    EvaluatorFailureError,
    is_evaluator_failure,
)
from hierl.evaluators.ray_runtime import ActorGroup
from hierl.evaluators.restarts import RestartBudget
from hierl.evaluators.spec import EvaluatorSpec
from hierl.optimizers.replay.buffer import ReplayBuffer
from hierl.policy_graph import Weights
from hierl.sample_batch import DEFAULT_POLICY_ID
from hierl.utils import piecewise_linear, seed_everything

logger = logging.getLogger(__name__)

ROLES = ("self_play", "replay", "learner", "arena")
"""The actor roles, as named in ``actor_restarts/<role>``."""
_TASK_ROLE = {"self_play": "self_play", "train": "learner", "compare": "arena", "strength": "arena"}


def gate_accepts(result: ArenaResult, threshold: float) -> bool:
    """The best-player gate: the candidate's score reaches ``threshold``."""
    return result.games > 0 and result.score >= threshold


class AlphaZeroTrainer(BaseTrainer):
    """AlphaGo Zero's self-play / optimize / evaluate loop (see the module docstring).

    Result keys besides the standard ones: ``strength/score_vs_<opponent>`` (and
    ``strength/wins|draws|losses``, ``strength/model_version``), ``best_model_version``,
    ``candidates_accepted``, ``candidates_rejected``, ``candidates_evaluated``,
    ``replay_size``, ``num_self_play_games``, ``first_player_win_rate``, ``draw_rate``,
    ``arena/last_score``, ``num_actor_restarts``, ``actor_restarts/<role>`` (role in
    ``ROLES``) and the latest learner stats under ``learner/``.
    ``timesteps_total`` counts self-play moves, ``episodes_total`` self-play games.
    """

    name = "ALPHAZERO"
    config_class = AlphaZeroConfig
    config: AlphaZeroConfig

    def __init__(self, config: AlphaZeroConfig | Mapping[str, Any] | None = None, env: Any = None):
        super().__init__(config, env)
        c = self.config
        creator = resolve_env_creator(c.env)  # a clear error for unknown envs
        seed_everything(c.seed)
        self.game = game_for_config(c)
        self.observation_space, self.action_space = env_spaces(creator, c.env_config)
        self.best_policy = AlphaZeroPolicy(self.observation_space, self.action_space, c)
        self.best_version = 0
        self._epoch = 0  # bumped on every new best: comparisons against older ones are stale
        self._restores = 0  # bumped by set_state: tasks launched before are stale
        self.opponent = c.strength_opponent
        if self.opponent == "auto":
            self.opponent = "minimax" if isinstance(self.game, TicTacToe) else "mcts"
        self.counters: dict[str, float] = collections.defaultdict(float)
        self.learner_stats: dict[str, float] = {}
        self.last_arena_score = float("nan")
        self._rt = Runtime(c.num_self_play_workers > 0, c.sample_timeout_s)
        self.restarts = RestartBudget(
            c.max_actor_restarts, "max_actor_restarts", EvaluatorFailureError
        )
        """Actors recreated after a failure, by role, against ``max_actor_restarts``."""
        self._retired: dict[str, tuple[str, int]] = {}  # replaced actor's id → role, index
        self._build_components()
        self._outstanding: dict[Any, tuple[str, int, Any]] = {}
        self._idle_learners: set[int] = set(range(len(self.learners)))
        self._free_arenas: collections.deque[int] = collections.deque(range(len(self.arenas)))
        self._candidates: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._started = False
        self._broadcast_best()

    @property
    def actor_restarts(self) -> collections.Counter[str]:
        """Role → actors of that role recreated after a failure (Ray only)."""
        return self.restarts.counts

    # -- construction ------------------------------------------------------------------
    def _build_components(self) -> None:
        c = self.config
        spaces = (self.observation_space, self.action_space)
        # recreated self-play actors are built from the same spec
        self._self_play_spec = EvaluatorSpec.of(
            c.env,
            AlphaZeroPolicy,
            c,
            env_config=c.env_config,
            num_envs_per_evaluator=c.num_envs_per_self_play_worker,
            rollout_fragment_length=c.rollout_fragment_length,
            batch_mode="complete_episodes",
            seed=c.seed,
        )
        sub_seed = self._sub_seed
        if not self._rt.use_ray:
            self.self_play = [SelfPlayEvaluator(self._self_play_spec, worker_index=0)]
            self.replay = ReplayBuffer(c.replay_capacity, sub_seed(1))
            self.learners = [
                AlphaZeroLearner(*spaces, c, sub_seed(10 + j)) for j in range(c.num_learners)
            ]
            self.arenas = [Arena(*spaces, c, sub_seed(100 + a)) for a in range(c.num_arena_workers)]
            seed_everything(c.seed)  # the components above drew from the global RNGs
            return
        from hierl.evaluators.ray_runtime import ensure_ray

        # BaseTrainer.check_resources made sure that the cluster can hold every actor
        ensure_ray(c.ray_address)
        self.self_play = [self._make_actor("self_play", i) for i in range(c.num_self_play_workers)]
        self.replay = self._make_actor("replay", 0)
        self.learners = [self._make_actor("learner", j) for j in range(c.num_learners)]
        self.arenas = [self._make_actor("arena", a) for a in range(c.num_arena_workers)]

    def _sub_seed(self, k: int) -> int | None:
        return None if self.config.seed is None else self.config.seed + 7919 * k

    def _make_actor(self, role: str, index: int) -> Any:
        """A new Ray actor for ``role`` (one of ``ROLES``) with index ``index``."""
        import ray

        c = self.config
        spaces = (self.observation_space, self.action_space)
        if role == "self_play":
            cls = SelfPlayEvaluator.as_remote(num_cpus=c.num_cpus_per_self_play_worker)
            return cls.remote(self._self_play_spec, worker_index=index + 1, num_threads=1)
        if role == "replay":
            return ray.remote(num_cpus=c.num_cpus_for_replay)(ReplayBuffer).remote(
                c.replay_capacity, self._sub_seed(1)
            )
        if role == "learner":
            return ray.remote(num_cpus=c.num_cpus_per_learner)(AlphaZeroLearner).remote(
                *spaces, c, self._sub_seed(10 + index), 1
            )
        return ray.remote(num_cpus=c.num_cpus_per_arena_worker)(Arena).remote(
            *spaces, c, self._sub_seed(100 + index), 1
        )

    @classmethod
    def actor_groups(cls, config: Any) -> list[ActorGroup]:
        """The driver, then the self-play evaluators, the replay buffer, the learners and
        the arenas (none with ``num_self_play_workers=0``: everything runs in the driver)."""
        driver = super().actor_groups(config)
        if config.num_self_play_workers == 0:
            return driver
        return [
            *driver,
            ActorGroup(
                "self-play worker",
                config.num_self_play_workers,
                {"CPU": config.num_cpus_per_self_play_worker},
                "num_self_play_workers",
                {"CPU": "num_cpus_per_self_play_worker"},
            ),
            ActorGroup(
                "replay buffer",
                1,
                {"CPU": config.num_cpus_for_replay},
                share_settings={"CPU": "num_cpus_for_replay"},
            ),
            ActorGroup(
                "learner",
                config.num_learners,
                {"CPU": config.num_cpus_per_learner},
                "num_learners",
                {"CPU": "num_cpus_per_learner"},
            ),
            ActorGroup(
                "arena worker",
                config.num_arena_workers,
                {"CPU": config.num_cpus_per_arena_worker},
                "num_arena_workers",
                {"CPU": "num_cpus_per_arena_worker"},
            ),
        ]

    # -- routing -----------------------------------------------------------------------
    def _broadcast_best(self, learners: bool = True) -> None:
        """Send the best weights to every self-play evaluator and (``learners``) learner."""
        weights = self.best_policy.get_weights()
        self._best_ref = self._rt.put(weights)
        self._best_by_policy_ref = self._rt.put({DEFAULT_POLICY_ID: weights})
        for ev in self.self_play:
            self._rt.call(ev, "set_weights", self._best_by_policy_ref)
        for learner in self.learners if learners else ():
            self._rt.call(learner, "set_weights", self._best_ref)

    def _launch_self_play(self, i: int) -> None:
        batch_ref, stats_ref = self._rt.call(self.self_play[i], "self_play", num_returns=2)
        self._outstanding[stats_ref] = ("self_play", i, (batch_ref, self._restores))

    def _launch_learners(self) -> None:
        if self.counters["replay_added"] < self.config.learning_starts:
            return
        rows = self.config.train_batch_size * self.config.sgd_steps_per_round
        schedule = self.config.lr_schedule
        lr = piecewise_linear(schedule, self.counters["moves"]) if schedule else None
        for j in sorted(self._idle_learners):
            # the rows travel replay actor -> learner by reference, not via the driver
            batch_ref = self._rt.call(self.replay, "sample", rows)
            weights_ref, stats_ref = self._rt.call(
                self.learners[j], "train", batch_ref, lr, num_returns=2
            )
            self._outstanding[stats_ref] = ("train", j, (weights_ref, self._restores))
        self._idle_learners.clear()

    def _launch_compares(self) -> None:
        while self._free_arenas and self._candidates:
            learner, weights_ref = self._candidates.popitem(last=False)
            a = self._free_arenas.popleft()
            seed = int(self.counters["compare_seed"]) + (self.config.seed or 0)
            self.counters["compare_seed"] += 3
            ref = self._rt.call(
                self.arenas[a],
                "compare",
                weights_ref,
                self._best_ref,
                self.config.arena_games,
                seed,
            )
            self._outstanding[ref] = ("compare", a, (weights_ref, self._epoch, learner))

    def _start(self) -> None:
        if not self._started:
            self._started = True
            for i in range(len(self.self_play)):
                self._launch_self_play(i)

    def _step(self) -> tuple[str, Any]:
        """Process one finished task (the paper's ``_step``); returns its kind and value."""
        ref = self._rt.wait(list(self._outstanding))
        kind, index, extra = self._outstanding.pop(ref)
        try:
            value = self._rt.get(ref)
            if kind == "train" and not self.config.gate:  # the weights are the new best
                extra = (self._rt.get(extra[0]), extra[1])
        except Exception as error:
            if not self._rt.use_ray or not is_evaluator_failure(error):
                raise  # a bug, not a failure
            self._on_task_failure(kind, index, extra, error)
            return "failed", error
        if kind == "self_play":
            batch_ref, restores = extra
            if restores == self._restores:  # else played before a restore: dropped
                self._rt.call(self.replay, "add", batch_ref)
                for k, v in value.items():
                    self.counters[k] += v
                self.counters["replay_added"] += value["moves"]
            self._launch_self_play(index)
            self._launch_learners()
        elif kind == "train":
            weights, restores = extra
            self._idle_learners.add(index)
            if restores == self._restores:  # else trained before a restore: dropped
                self.counters["train_rounds"] += 1
                self.learner_stats = dict(value)
                if self.config.gate:  # a learner's newer candidate replaces its older
                    self._candidates[index] = weights
                else:  # the continual update: the learner's line is the best
                    self._make_best(weights, learners=False)
            self._launch_learners()
            self._launch_compares()
        elif kind == "compare":
            self._free_arenas.append(index)
            weights_ref, epoch, _ = extra
            if epoch == self._epoch:  # else it was played against a replaced best: drop it
                self.on_compare_result(value, weights_ref)
            self._launch_compares()
        return kind, value

    def on_compare_result(self, result: ArenaResult, candidate_weights: Any) -> bool:
        """Apply the gate to a comparison; on acceptance make the candidate the new best
        and broadcast it.  ``candidate_weights``: the weights (or a reference to them)."""
        self.counters["candidates_evaluated"] += 1
        self.last_arena_score = result.score
        if not gate_accepts(result, self.config.gate_threshold):
            self.counters["candidates_rejected"] += 1
            return False
        self._make_best(candidate_weights)
        return True

    def _make_best(self, weights: Any, learners: bool = True) -> None:
        """``weights`` (or a reference to them) become the best, broadcast to self-play
        and, with ``learners``, to the learners (the continual update skips its one
        learner, whose weights these are)."""
        if not isinstance(weights, Mapping):
            weights = self._rt.get(weights)
        self.best_policy.set_weights(weights)
        self.best_version += 1
        self._epoch += 1
        self.counters["candidates_accepted"] += 1
        self._candidates.clear()  # queued candidates were trained against the old best
        self._broadcast_best(learners)

    # -- the iteration -----------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Run the event loop for the iteration's budget, then estimate strength."""
        c = self.config
        start = time.perf_counter()
        self._start()
        before = dict(self.counters)
        rounds0 = self.counters["train_rounds"]
        while True:
            if c.time_budget_s is not None and time.perf_counter() - start >= c.time_budget_s:
                break
            if (
                c.train_rounds_per_iter is not None
                and self.counters["train_rounds"] - rounds0 >= c.train_rounds_per_iter
            ):
                break
            self._step()
        strength = self._estimate_strength()
        result = self._result(before, strength)
        moves = result["timesteps_this_iter"]
        result["sample_throughput"] = moves / max(time.perf_counter() - start, 1e-9)
        return self.finish_iteration(result, start)

    def _estimate_strength(self) -> tuple[ArenaResult, int] | None:
        """Best model vs the fixed opponent; the loop keeps routing results meanwhile."""
        c = self.config
        if c.strength_games == 0:
            return None
        version = self.best_version
        seed = (c.seed or 0) + 1_000_003 * (self.iteration + 1)
        self._launch_strength(self.iteration % len(self.arenas), (seed, self._best_ref))
        while True:
            kind, value = self._step()
            if kind == "strength":
                return value, version

    def _launch_strength(self, a: int, args: tuple[int, Any]) -> None:
        seed, weights_ref = args
        c = self.config
        ref = self._rt.call(
            self.arenas[a], "strength", weights_ref, self.opponent, c.strength_games, seed
        )
        self._outstanding[ref] = ("strength", a, args)

    def _result(
        self, before: Mapping[str, float], strength: tuple[ArenaResult, int] | None
    ) -> dict[str, Any]:
        cnt = self.counters
        games_iter = cnt["games"] - before.get("games", 0.0)
        moves_iter = cnt["moves"] - before.get("moves", 0.0)
        games = max(cnt["games"], 1.0)
        result: dict[str, Any] = {
            "timesteps_total": int(cnt["moves"]),
            "timesteps_this_iter": int(moves_iter),
            "episodes_total": int(cnt["games"]),
            "episodes_this_iter": int(games_iter),
            "episode_len_mean": moves_iter / games_iter if games_iter else float("nan"),
            "num_self_play_games": int(cnt["games"]),
            "first_player_win_rate": cnt["first_player_wins"] / games,
            "draw_rate": cnt["draws"] / games,
            "best_model_version": self.best_version,
            "candidates_accepted": int(cnt["candidates_accepted"]),
            "candidates_rejected": int(cnt["candidates_rejected"]),
            "candidates_evaluated": int(cnt["candidates_evaluated"]),
            "train_rounds": int(cnt["train_rounds"]),
            "replay_size": int(min(cnt["replay_added"], self.config.replay_capacity)),
            "arena/last_score": self.last_arena_score,
            "num_actor_restarts": self.restarts.made,
        }
        result.update({f"actor_restarts/{r}": self.actor_restarts[r] for r in ROLES})
        result.update({f"learner/{k}": v for k, v in self.learner_stats.items()})
        if strength is None:
            result.update(episode_reward_mean=float("nan"))
            return result
        res, version = strength
        score = res.score
        per_game = [1.0] * res.wins + [0.5] * res.draws + [0.0] * res.losses
        result.update(
            {
                "episode_reward_mean": score,
                "episode_reward_min": min(per_game),
                "episode_reward_max": max(per_game),
                f"strength/score_vs_{self.opponent}": score,
                "strength/wins": res.wins,
                "strength/draws": res.draws,
                "strength/losses": res.losses,
                "strength/model_version": version,
            }
        )
        return result

    # -- recovery (Ray only) -------------------------------------------------------------
    def _on_task_failure(self, kind: str, index: int, extra: Any, error: BaseException) -> None:
        """A task failed because an actor died or a self-play env raised: recreate that
        actor (unless it was replaced already), then put the task's work back."""
        role, failed = self._failed_actor(kind, index, error)
        if failed is not None:
            self._recreate(role, failed, error)
        self._requeue(kind, index, extra)

    def _failed_actor(self, kind: str, index: int, error: BaseException) -> tuple[str, int | None]:
        """The failed actor's role and index (index None: it was replaced already)."""
        dead = getattr(error, "actor_id", None)
        if dead is None:  # an EnvError, raised in the task's own (self-play) actor
            return _TASK_ROLE[kind], index
        if dead in self._retired:
            return self._retired[dead][0], None
        # CRUCIAL: not always the task's own actor: a training round fails with the
        # replay actor's death when its sampled batch (an argument) could not be made
        for role, i, handle in self._actors():
            if _actor_id(handle) == dead:
                return role, i
        raise error  # an actor that is not ours

    def _actors(self) -> list[tuple[str, int, Any]]:
        """(role, index, handle) of every current actor."""
        return [
            *(("self_play", i, h) for i, h in enumerate(self.self_play)),
            ("replay", 0, self.replay),
            *(("learner", j, h) for j, h in enumerate(self.learners)),
            *(("arena", a, h) for a, h in enumerate(self.arenas)),
        ]

    def _recreate(self, role: str, index: int, error: BaseException) -> None:
        """Replace actor ``role`` / ``index`` by a new one, prepared before any task."""
        import ray

        name = f"ALPHAZERO's {role} actor {index}"
        self.restarts.check_recreatable(name, error)
        self.restarts.check(
            name,
            error,
            detail=f": {dict(self.restarts.counts)}",
            last_error=f"{type(error).__name__}: {error}",
        )
        logger.warning("%s failed, recreating it: %s: %s", name, type(error).__name__, error)
        old = self.replay if role == "replay" else self._role_list(role)[index]
        with contextlib.suppress(Exception):  # gone already, or alive after an env error
            ray.kill(old, no_restart=True)
        self._retired[_actor_id(old)] = (role, index)
        new = self._make_actor(role, index)
        if role == "replay":
            self.replay = new
            self.counters["replay_added"] = 0.0  # it starts empty: learning_starts again
        else:
            self._role_list(role)[index] = new
        self.restarts.record(role)
        # CRUCIAL: queued before any loop task (an actor runs one caller's calls in
        # order), so a new self-play actor never plays with its initial random weights
        if role == "self_play":
            self._rt.call(new, "set_weights", self._best_by_policy_ref)
        elif role == "learner":
            self._rt.call(new, "set_weights", self._best_ref)
            self._candidates.pop(index, None)  # its weights may have lived on a lost node
        for ref, (kind, i, extra) in list(self._outstanding.items()):
            if _TASK_ROLE[kind] == role and i == index:  # in flight on the dead actor
                del self._outstanding[ref]
                self._requeue(kind, i, extra)

    def _role_list(self, role: str) -> list[Any]:
        return {"self_play": self.self_play, "learner": self.learners, "arena": self.arenas}[role]

    def _requeue(self, kind: str, index: int, extra: Any) -> None:
        """Put a lost task's work back into the loop (see the module docstring)."""
        if kind == "self_play":
            self._launch_self_play(index)
        elif kind == "train":
            self._idle_learners.add(index)
            self._launch_learners()
        elif kind == "compare":
            self._free_arenas.append(index)
            weights_ref, epoch, learner = extra
            if epoch == self._epoch and learner not in self._candidates:
                self._candidates[learner] = weights_ref
                self._candidates.move_to_end(learner, last=False)  # next in line
            self._launch_compares()
        else:  # strength: the same game seeds and weights on the recreated arena
            self._launch_strength(index, extra)

    def _sync_call(self, role: str, index: int, method: str, *args: Any) -> Any:
        """A synchronous call to actor ``role`` / ``index``; a dead actor is recreated
        once (a replay buffer empty, a learner from the best weights) and called again."""

        def actor() -> Any:
            return self.replay if role == "replay" else self._role_list(role)[index]

        try:
            return self._rt.get(self._rt.call(actor(), method, *args))
        except Exception as error:
            if not self._rt.use_ray or not is_evaluator_failure(error):
                raise
            self._recreate(role, index, error)
            return self._rt.get(self._rt.call(actor(), method, *args))

    # -- serving -----------------------------------------------------------------------
    @staticmethod
    def load_player(
        checkpoint: str | Path,
        *,
        simulations: int | None = None,
        temperature: float = 0.0,
        noise: float = 0.0,
        seed: int | None = None,
        allow_imports: Collection[str] = (),
    ) -> AlphaZeroPlayer:
        """Only what acting needs from a checkpoint: its best model in an MCTS, built in
        this process (no Ray, no actors, no replay buffer); acting settings are arguments
        (see ``hierl.algorithms.alphazero.player``)."""
        return AlphaZeroPlayer.from_checkpoint(
            checkpoint,
            simulations=simulations,
            temperature=temperature,
            noise=noise,
            seed=seed,
            allow_imports=allow_imports,
        )

    @classmethod
    def acting_checkpoint(
        cls, config: dict[str, Any], state: Mapping[str, Any]
    ) -> tuple[type[BaseTrainer], dict[str, Any], Mapping[str, Any]]:
        """Refused: AlphaZero acts through its search, not a flat policy (see
        ``load_player``)."""
        raise CheckpointError(
            "an ALPHAZERO checkpoint acts through its search, not a flat policy: load it with "
            "AlphaZeroTrainer.load_player(path, simulations=...), play it with `hierl play`, "
            "serve it with `hierl serve` (/act) or export its network with `hierl export`"
        )

    def compute_single_action(self, obs: Any, explore: bool = False) -> int:
        """The best model's move for one observation (greedy MCTS unless ``explore``)."""
        action, _, _ = self.best_policy.compute_single_action(np.asarray(obs), explore=explore)
        return int(action)

    def get_weights(self) -> Weights:
        """The best model's weights."""
        return self.best_policy.get_weights()

    # -- state -------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """Best weights, counters, the replay buffer's contents and each learner's
        candidate (its weights and Adam moments)."""
        replay = self._sync_call("replay", 0, "get_state")
        return {
            "best_weights": self.best_policy.get_weights(),
            "best_version": self.best_version,
            "counters": dict(self.counters),
            "iteration": self.iteration,
            "time_total_s": self.time_total_s,
            "replay": replay,
            "learners": [
                self._sync_call("learner", j, "get_state") for j in range(len(self.learners))
            ],
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore ``get_state`` output; every component gets the best weights."""
        self.best_policy.set_weights(state["best_weights"])
        self.best_version = int(state["best_version"])
        self._epoch += 1
        # first: a recreated replay actor resets the counters
        self._sync_call("replay", 0, "set_state", state["replay"])
        self.counters = collections.defaultdict(
            float, {k: float(v) for k, v in state["counters"].items()}
        )
        self.iteration = int(state["iteration"])
        self.time_total_s = float(state["time_total_s"])
        self._candidates.clear()
        self._broadcast_best()
        # a learner keeps its candidate and Adam moments; one more than the checkpoint
        # held (num_learners raised on resume) starts from the best weights, as at start
        for j, learner_state in enumerate(state.get("learners", [])[: len(self.learners)]):
            self._sync_call("learner", j, "set_state", learner_state)
        # last: every task launched until now (before the restore, or on an actor
        # recreated during it, before its state arrived) is dropped when it finishes
        self._restores += 1

    def stop(self) -> None:
        """Kill the actors (nothing to do in-process)."""
        super().stop()
        if not self._rt.use_ray:
            return
        import ray

        for actor in [*self.self_play, self.replay, *self.learners, *self.arenas]:
            with contextlib.suppress(Exception):  # already dead is fine
                ray.kill(actor)
        self.self_play, self.learners, self.arenas = [], [], []
        self._outstanding.clear()


def _actor_id(handle: Any) -> str:
    """A Ray actor handle's id, as ``RayActorError.actor_id`` names it (hex)."""
    return handle._actor_id.hex()

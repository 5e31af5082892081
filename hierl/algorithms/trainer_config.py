"""TrainerConfig: the settings shared by every algorithm that samples with evaluators.

Algorithm configs subclass it (``PPOConfig(TrainerConfig)``); ``Trainer``
(``hierl.algorithms.trainer``) builds its evaluators and optimizer from it.  The
optimizer's own settings are declared in its config class and reached through
``optimizer_config`` (flat keys are aliases: ``resolve_aliases``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, TypeVar

from hierl.algorithms import multi_agent
from hierl.algorithms.off_policy_estimation import check_estimators
from hierl.algorithms.serving import ServeDeployment
from hierl.algorithms.trainer_base import BaseConfig
from hierl.config import ConfigError, from_dict, suggest_key, translate_rllib_keys
from hierl.evaluators.evaluator_set import DEFAULT_MAX_EVALUATOR_RESTARTS
from hierl.evaluators.external.settings import ExternalInputConfig
from hierl.evaluators.offline.settings import SAMPLER, InputSpec, OutputSpec, path_strings
from hierl.evaluators.offline.writer import DEFAULT_MAX_FILE_SIZE
from hierl.evaluators.policy_map import PolicySpec
from hierl.evaluators.settings import SamplingSettings
from hierl.models.networks import ModelConfig
from hierl.optimizers import (
    OptimizerConfig,
    get_optimizer_class,
    optimizer_names,
    optimizer_settings,
)

TC = TypeVar("TC", bound="TrainerConfig")

ACTING_OVERRIDES: dict[str, Any] = {
    "num_evaluators": 0,
    "evaluation_interval": 0,
    "input": SAMPLER,
    "input_mix": {},
    "output": None,
    "off_policy_estimation": (),
    "serve_deployment": None,
}
"""Config overrides that rebuild a checkpoint's trainer only to act with its policies
(``hierl rollout``, ``export``, ``serve``): no remote or evaluation evaluators, the env
as input (a training run's external server or data files stay closed) and no logged
output."""


def same_defaults(names: tuple[str, ...], **settings: Any) -> dict[str, dict[str, Any]]:
    """``optimizer_defaults`` giving each optimizer in ``names`` the same ``settings``
    (e.g. an algorithm's batch size under every strategy it runs on)."""
    return {name: dict(settings) for name in names}


@dataclasses.dataclass
class TrainerConfig(SamplingSettings, BaseConfig):
    """Settings shared by every algorithm.  Algorithm configs subclass this.

    The evaluators' sampling settings are declared once, in
    ``SamplingSettings``, and included here as flat keys.

    An algorithm names the optimizers it supports and states, per optimizer, the
    settings it changes (``optimizer_defaults``); the optimizer's settings themselves are
    declared only in its config class (``optimizer_config``).  Flat keys such as
    ``train_batch_size`` are aliases of ``optimizer_config.<key>`` (``resolve_aliases``).
    """

    supported_optimizers: ClassVar[tuple[str, ...] | None] = None
    """The optimizer names this algorithm runs on.  None (the default): every registered
    strategy, the policy's capabilities deciding (``Trainer`` refuses at construction a
    strategy that cannot train its policy class, naming what is missing); an algorithm
    narrows it to the strategies its loss is written for.  Read it through
    ``optimizer_choices()``."""
    default_optimizer: ClassVar[str] = "local"
    """The optimizer used when ``optimizer`` is empty."""
    optimizer_defaults: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    """Optimizer name -> the settings of its config this algorithm changes."""

    num_evaluators: int = 0
    """Remote evaluator actors; 0 samples in the driver process (no Ray needed)."""
    num_cpus_per_evaluator: float = 1.0
    """CPUs reserved by each remote evaluator actor (fractions allowed)."""
    num_gpus_per_evaluator: float = 0.0
    """GPUs reserved by each remote evaluator actor."""
    timesteps_per_iteration: int = 0
    """Each ``train()`` repeats optimizer steps until this many env steps were sampled
    (0: one step), so that an iteration of a one-step-per-update algorithm (DQN, DDPG)
    is not a single env step."""
    gamma: float = 0.99
    """Discount factor."""
    lr: float = 5e-4
    """Learning rate (Adam)."""
    lr_schedule: tuple[tuple[float, float], ...] | None = None
    """Piecewise-linear ``[[timestep, lr], ...]`` overriding ``lr`` when set."""
    grad_clip: float | None = None
    """Clip the global gradient norm to this value (None: no clipping)."""
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    """Network settings (hiddens, activation, vf_share_layers, conv_filters...)."""
    optimizer: str = ""
    """Policy optimizer by name (one of ``optimizer_choices()``); empty: the algorithm's
    ``default_optimizer``."""
    optimizer_config: dict | OptimizerConfig = dataclasses.field(default_factory=dict)
    """Settings of the chosen optimizer (its config class: e.g. ``{"num_towers": 2}`` for
    ``multi_gpu``), over the algorithm's ``optimizer_defaults`` for it; a dict becomes
    that typed config when the config is built."""
    metrics_smoothing_episodes: int = 100
    """Episode statistics are over the last this-many episodes."""
    policies: dict = dataclasses.field(default_factory=dict)
    """Multi-agent: policy id → ``PolicySpec`` (policy class, None = this algorithm's;
    spaces, None = from the env's agents mapped to it; config overrides) or a dict of
    its fields.  Empty: single-agent (or one policy for every agent of a MultiAgentEnv)."""
    recreate_failed_evaluators: bool = True
    """A remote evaluator that fails (process or node lost, env raised) is recreated with
    the same worker index and given the current weights, filters and counters before it
    samples again; False: it is dropped and training goes on with the others."""
    max_evaluator_restarts: int = DEFAULT_MAX_EVALUATOR_RESTARTS
    """Recreations allowed in all (default 100); the next failure ends training with an
    error naming the evaluator, the count and the last error.  A recreated evaluator that
    fails again before its first env step (an env failing on every reset) ends training
    at once."""
    fail_fast_on_evaluator_failure: bool = False
    """End training at the first evaluator failure, re-raising its original error (with
    the remote traceback) instead of recreating or dropping the evaluator."""
    evaluation_interval: int = 0
    """Evaluate every this many ``train()`` iterations (0: never): the current weights
    play ``evaluation_num_episodes`` whole episodes on separate evaluators
    (``hierl.algorithms.evaluation``), reported as ``evaluation/episode_reward_mean``
    etc."""
    evaluation_num_episodes: int = 10
    """Episodes per evaluation."""
    always_attach_evaluation_results: bool = False
    """Every ``train()`` result carries the latest evaluation's metrics (NaN before the
    first, and after a restore or new weights (``set_weights``, ``set_filters``) until the
    next), not only every ``evaluation_interval``-th (RLlib's setting of this name).  A
    failed evaluation keeps the latest metrics, with ``evaluation/episodes`` 0.  Tune needs
    a result's metric in every result: set it to rank trials (PBT's exploits, a searcher)
    by ``evaluation/episode_reward_mean``."""
    evaluation_explore: bool = False
    """Sample actions in evaluation (False: the greedy action)."""
    evaluation_num_evaluators: int = 0
    """Remote evaluation evaluators (``num_cpus_per_evaluator`` each); 0: evaluate in the
    driver."""
    evaluator_scheduling_strategy: Literal["DEFAULT", "SPREAD"] = "DEFAULT"
    """Ray placement of the evaluator actors; ``SPREAD`` puts them on as many nodes as
    possible (a lost node then takes fewer evaluators with it)."""
    input: Any = SAMPLER
    """Where evaluators' ``sample()`` reads experience: ``"sampler"`` (the env), logged
    data written by ``output`` (a directory, a glob, a file or a list of files), or a
    ``ray.data.Dataset``; logged data makes the evaluators OfflineEvaluators
    (``hierl.evaluators.offline``), each reading its share of the files.
    ``"external"``: apps drive the episodes through ``hierl.serve.PolicyClient`` over
    HTTP (``hierl.evaluators.external``; ``env`` then only gives the spaces)."""
    input_external: ExternalInputConfig = dataclasses.field(default_factory=ExternalInputConfig)
    """Where the evaluators of ``input: "external"`` listen (``host``, ``port``: the local
    evaluator on ``port`` with no remote evaluators, else remote evaluator ``i`` on
    ``port + i``), ``episode_timeout_s``, ``auth_token``, ``max_episodes``."""
    input_mix: dict = dataclasses.field(default_factory=dict)
    """Several sources drawn by probability per ``sample()``, e.g. ``{"sampler": 0.5,
    "/data/expert": 0.5}`` (instead of ``input``)."""
    input_shuffle_window: int = 10_000
    """Rows of logged data read and shuffled together (0: file order, no shuffling)."""
    input_skip_bad_files: bool = False
    """Skip (with a warning) input files that are corrupt or do not fit the policy
    instead of raising."""
    postprocess_inputs: bool = False
    """Run the policy's ``postprocess_trajectories`` on logged data as it is read (in
    file order, before shuffling); MARWIL needs it for its returns."""
    off_policy_estimation: tuple[str, ...] = ()
    """Estimators (``is``, ``wis``; ``hierl.algorithms.off_policy_estimation``) of the
    current policy's return from the whole logged episodes of ``input``'s files (at most
    ``off_policy_estimation_max_rows`` rows, read once), reported every
    ``evaluation_interval`` iterations (every iteration if 0) as
    ``off_policy_estimation/<name>/v_target`` etc."""
    off_policy_estimation_max_rows: int = 100_000
    """Rows of logged episodes kept for off-policy estimation."""
    output: str | None = None
    """A directory where every evaluator writes each batch it samples (Parquet, see
    ``hierl.evaluators.offline.writer``); None: nothing is written."""
    output_postprocessed: bool = True
    """Write batches after the policy's postprocessing (False: the rows as sampled)."""
    output_max_file_size: int = DEFAULT_MAX_FILE_SIZE
    """An evaluator starts a new output file after this many (uncompressed) bytes."""
    output_compression: Literal["zstd", "snappy", "gzip", "lz4", "none"] = "zstd"
    """Parquet compression of output files."""
    serve_deployment: dict | ServeDeployment | None = None
    """Push the policy to a running ``hierl serve`` app every few iterations (the paper's
    ``suggest_model``), e.g. ``{"app": "hierl", "every": 5}``; the app then answers with the
    new weights and filters (``hierl.algorithms.serving``).  None: no pushing."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("num_evaluators", self.num_evaluators >= 0, "must be >= 0")
        self.check("num_cpus_per_evaluator", self.num_cpus_per_evaluator >= 0, "must be >= 0")
        self.check("timesteps_per_iteration", self.timesteps_per_iteration >= 0, ">= 0")
        self.check("gamma", 0.0 <= self.gamma <= 1.0, "must be in [0, 1]")
        self.check("lr", self.lr > 0, "must be > 0")
        self.check_schedule("lr_schedule", "timestep", "lr")
        self.check("grad_clip", self.grad_clip is None or self.grad_clip > 0, "must be > 0")
        self.check("metrics_smoothing_episodes", self.metrics_smoothing_episodes >= 1, ">= 1")
        self.check("max_evaluator_restarts", self.max_evaluator_restarts >= 0, "must be >= 0")
        self.check("evaluation_interval", self.evaluation_interval >= 0, "must be >= 0")
        self.check("evaluation_num_episodes", self.evaluation_num_episodes >= 1, "must be >= 1")
        self.check("evaluation_num_evaluators", self.evaluation_num_evaluators >= 0, "must be >= 0")
        self.check(
            "always_attach_evaluation_results",
            not self.always_attach_evaluation_results or self.evaluation_interval > 0,
            "needs evaluation_interval > 0 (there is no evaluation to attach)",
        )
        self.check("input_shuffle_window", self.input_shuffle_window >= 0, "must be >= 0")
        self.check("output_max_file_size", self.output_max_file_size > 0, "must be > 0")
        self.input = path_strings(self.input)
        self.input_mix = {path_strings(k): p for k, p in self.input_mix.items()}
        spec = self.input_spec()  # validates input / input_mix
        check_estimators(self.off_policy_estimation)
        if self.off_policy_estimation and (spec is None or not spec.logged_files()):
            raise ConfigError(
                f"config field 'off_policy_estimation' = {self.off_policy_estimation!r} "
                "estimates from logged episodes: set 'input' (or input_mix) to files of "
                "logged data"
            )
        if isinstance(self.serve_deployment, Mapping):
            self.serve_deployment = from_dict(
                ServeDeployment, self.serve_deployment, prefix="serve_deployment."
            )
        self.policies = {str(pid): PolicySpec.coerce(pid, s) for pid, s in self.policies.items()}
        multi_agent.validate(self)
        self._resolve_optimizer()

    # -- the optimizer's settings ------------------------------------------------------
    def _resolve_optimizer(self) -> None:
        """Fill in the optimizer's name and make ``optimizer_config`` its typed config."""
        name = self.optimizer = self.check_optimizer(self.optimizer)
        opt_class = get_optimizer_class(name)
        if isinstance(self.optimizer_config, OptimizerConfig):
            if type(self.optimizer_config) is not opt_class.config_class:
                raise ConfigError(
                    f"config field 'optimizer_config' is a {type(self.optimizer_config).__name__}"
                    f"; optimizer '{name}' takes a {opt_class.config_class.__name__} or a dict"
                )
        else:
            self.optimizer_config = self.optimizer_config_for(name, self.optimizer_config)
        try:
            opt_class.check_config(self.optimizer_config, self.num_evaluators)
        except ConfigError as e:
            raise ConfigError(f"optimizer_config of '{name}': {e}") from e

    @classmethod
    def optimizer_choices(cls) -> tuple[str, ...]:
        """The optimizer names this config accepts: ``supported_optimizers``, or every
        registered strategy when it is None."""
        if cls.supported_optimizers is None:
            return tuple(optimizer_names())
        return tuple(cls.supported_optimizers)

    @classmethod
    def check_optimizer(cls, name: str) -> str:
        """The optimizer ``name`` stands for (empty: ``default_optimizer``); ConfigError
        for an unknown name ("did you mean") or one this algorithm's
        ``supported_optimizers`` leaves out, saying how to allow it."""
        name = name or cls.default_optimizer
        choices = cls.optimizer_choices()
        if name not in choices:
            get_optimizer_class(name)  # unknown names: "did you mean"
            raise ConfigError(
                f"config field 'optimizer' = '{name}' is not supported by "
                f"{cls.__name__}; valid: {', '.join(choices)} ({cls.__name__}."
                "supported_optimizers narrows the registered strategies to those its "
                f"loss is written for; to run '{name}', subclass {cls.__name__} with "
                "supported_optimizers naming it, or set supported_optimizers = None to "
                "allow every strategy the policy class can run)"
            )
        return name

    @classmethod
    def optimizer_config_for(
        cls, name: str, settings: Mapping[str, Any] | None = None
    ) -> OptimizerConfig:
        """The config of optimizer ``name``: this algorithm's ``optimizer_defaults`` for it
        under ``settings``."""
        opt_class = get_optimizer_class(name)
        try:
            return opt_class.config_class.from_dict(
                {**cls.optimizer_defaults.get(name, {}), **(settings or {})}
            )
        except ConfigError as e:
            raise ConfigError(f"optimizer_config of '{name}': {e}") from e

    @classmethod
    def from_dict(cls: type[TC], data: Mapping[str, Any] | None = None) -> TC:
        """Build the config from a dict, reading flat optimizer keys as aliases
        (``resolve_aliases``); unknown keys raise a "did you mean" ConfigError."""
        return from_dict(cls, cls.resolve_aliases(data or {}))

    @classmethod
    def resolve_aliases(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """``data`` with every flat optimizer key moved into ``optimizer_config``.

        The one place where settings are linked by name: a top-level key that is no field
        of this config but a field of the chosen optimizer's config (``optimizer``, else
        ``default_optimizer``) is an alias of ``optimizer_config.<key>``, so the flat
        files users bring from RLlib keep working (``{"train_batch_size": 4000,
        "num_sgd_iter": 30}`` for ``local``).  Giving a key both ways with different
        values is an error; a key that is neither raises with "did you mean".
        """
        if not isinstance(data, Mapping):
            return data  # from_dict names the wrong type
        own = {f.name for f in dataclasses.fields(cls) if f.init}
        flat = [k for k in data if k not in own]
        if not flat:
            return dict(data)
        name = data.get("optimizer") or ""
        nested = data.get("optimizer_config") or {}
        if isinstance(nested, OptimizerConfig):
            nested = nested.to_dict()
        if not isinstance(name, str) or not isinstance(nested, Mapping):
            return dict(data)  # from_dict / __post_init__ name the wrong type
        name = cls.check_optimizer(name)
        opt_fields = optimizer_settings(name)
        data = translate_rllib_keys(data, own | opt_fields)
        flat = [k for k in data if k not in own]
        out = {k: v for k, v in data.items() if k in own}
        nested = dict(nested)
        for key in flat:
            if key not in opt_fields:
                raise ConfigError(cls._unknown_key_message(str(key), name, own, opt_fields))
            if key in nested and nested[key] != data[key]:
                raise ConfigError(
                    f"config key '{key}' = {data[key]!r} and optimizer_config.{key} = "
                    f"{nested[key]!r} disagree ('{key}' is an alias of optimizer_config.{key})"
                    "; give it once"
                )
            nested[key] = data[key]
        out["optimizer_config"] = nested
        return out

    @classmethod
    def _unknown_key_message(
        cls, key: str, optimizer: str, own: set[str], opt_fields: frozenset[str]
    ) -> str:
        owners = [
            n for n in cls.optimizer_choices() if n != optimizer and key in optimizer_settings(n)
        ]
        hint = (
            f"; it is a setting of optimizer {', '.join(repr(n) for n in owners)}, not of "
            f"'{optimizer}'"
            if owners
            else ""
        )
        return (
            f"unknown config key '{key}' for {cls.__name__}"
            f"{suggest_key(key, own | opt_fields)}{hint}; valid keys: "
            f"{', '.join(sorted(own))}, and the settings of optimizer '{optimizer}' "
            f"(aliases of optimizer_config.<key>): {', '.join(sorted(opt_fields))}"
        )

    def replace(self: TC, **changes: Any) -> TC:
        """A copy with ``changes`` applied (flat optimizer keys as in ``from_dict``); a
        new ``optimizer`` starts from the algorithm's defaults for it."""
        data = self.to_dict()
        if changes.get("optimizer", self.optimizer) != self.optimizer:
            data["optimizer_config"] = {}
        nested = {**data["optimizer_config"], **dict(changes.pop("optimizer_config", {}))}
        own = {f.name for f in dataclasses.fields(self)}
        for key in [k for k in changes if k not in own]:
            nested[key] = changes.pop(key)
        data.update(changes, optimizer_config=nested)
        return type(self).from_dict(data)

    def input_spec(self) -> InputSpec | None:
        """``input`` / ``input_mix`` as an InputSpec (None: the sampler only); see
        ``InputSpec.from_config``."""
        return InputSpec.from_config(self)

    def output_spec(self) -> OutputSpec | None:
        """``output`` and its settings as an OutputSpec (None: no output)."""
        if not self.output:
            return None
        return OutputSpec(
            self.output,
            postprocessed=self.output_postprocessed,
            max_file_size=self.output_max_file_size,
            compression=self.output_compression,
        )

    def fragment_for(self, batch_size: int) -> int:
        """``rollout_fragment_length``, or when it is 0, ``batch_size`` split over all
        sub-envs (each sample() call then gathers about ``batch_size`` rows in all)."""
        if self.rollout_fragment_length:
            return self.rollout_fragment_length
        envs = max(1, self.num_evaluators) * self.num_envs_per_evaluator
        return max(1, math.ceil(batch_size / envs))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict; callables (env, callbacks) are recorded by name only."""
        out = super().to_dict()
        if self.callbacks is not None and not isinstance(self.callbacks, str):
            # Code is never stored in (or loaded from) checkpoints: pass the class again,
            # or name it as "module:Class" (stored as that string).
            out["callbacks"] = None
        if not isinstance(self.input, (str, list, tuple)):
            out["input"] = None  # a Ray dataset: pass it again when restoring
        if any(not isinstance(k, str) for k in self.input_mix):
            out["input_mix"] = {}  # holds a Ray dataset: pass it again
        out.update(multi_agent.to_json(self))
        return out

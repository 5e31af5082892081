"""The ``hierl`` command line: train an algorithm, roll out a checkpoint, list algorithms.

Examples::

    hierl train --algo PPO --env CartPole-v1
    hierl train --algo PG --env CartPole-v1 --config cfg.yaml --stop training_iteration=50
    hierl rollout hierl_results/PPO_CartPole-v1_20250101-120000/checkpoints/000042
    hierl list
    hierl config PPO

User errors (bad arguments, unknown algorithm/env/config key, unreadable files, bad
checkpoints) print one ``hierl: error: ...`` line to stderr and exit with status 2.
Heavy libraries (torch, ray, matplotlib) are imported only by the commands that need them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import textwrap
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PROG = "hierl"
TIMESTEPS_CAP = 1_000_000
"""Safety cap added to the default stop conditions."""
RESULTS_FILE = "result.jsonl"
PARAMS_FILE = "params.json"
CURVE_FILE = "learning_curve.png"
CHECKPOINTS_DIR = "checkpoints"


class CLIError(Exception):
    """A user error: reported as one ``hierl: error: ...`` line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """ArgumentParser that raises CLIError instead of printing usage and exiting."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise CLIError(f"{message} (see '{self.prog} --help')")


# -- argument parsing ------------------------------------------------------------------
def parse_stop(text: str) -> tuple[str, float]:
    """Parse one ``--stop KEY=VALUE`` into ``(key, target)``."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(
            f"malformed stop condition {text!r}: expected KEY=VALUE, "
            "e.g. episode_reward_mean=475 or training_iteration=100"
        )
    try:
        target = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"stop condition {text!r}: value {value.strip()!r} is not a number"
        ) from None
    if not math.isfinite(target):
        raise argparse.ArgumentTypeError(f"stop condition {text!r}: value must be finite")
    return key, target


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("hierl")
    except Exception:
        return "unknown"


def _algorithm_names() -> list[str]:
    from hierl.algorithms.registry import trainer_names

    return trainer_names()


def _algorithm(text: str) -> str:
    """``--algo`` / ``ALGO``: a registered algorithm name in any case, as registered."""
    from hierl.algorithms.registry import canonical_name
    from hierl.config import ConfigError

    try:
        return canonical_name(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    """The ``hierl`` argument parser with its subcommands."""
    parser = _Parser(
        prog=PROG,
        description="hierl: distributed reinforcement learning on Ray and PyTorch.",
        epilog="Run 'hierl COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    algos = ", ".join(_algorithm_names())

    train = sub.add_parser(
        "train",
        help="train an algorithm on an environment",
        description=textwrap.fill(
            "Train an algorithm until a stop condition holds, logging every iteration to "
            "OUTPUT_DIR/result.jsonl, saving checkpoints and a learning curve. "
            "Ctrl-C stops training cleanly after saving a final checkpoint.",
            width=79,
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            f"algorithms: {algos}\n"
            "config keys of an algorithm: hierl config ALGO\n\n"
            "example:\n"
            "  hierl train --algo PPO --env CartPole-v1 \\\n"
            '      --config \'{"train_batch_size": 2000, "lr": 3e-4}\' \\\n'
            "      --stop episode_reward_mean=475 --stop timesteps_total=500000 \\\n"
            "      --checkpoint-freq 10\n\n"
            "Without --stop, training stops when episode_reward_mean reaches the env's "
            f"reward_threshold\n(if it has one) or timesteps_total reaches {TIMESTEPS_CAP}."
        ),
    )
    train.add_argument(
        "--algo",
        required=True,
        type=_algorithm,
        metavar="ALGO",
        help=f"algorithm name, any case (one of: {algos})",
    )
    train.add_argument(
        "--env",
        metavar="ENV",
        help="Gymnasium env id (e.g. CartPole-v1) or a name given to hierl.register_env; "
        "overrides 'env' in --config",
    )
    train.add_argument(
        "--config",
        action="append",
        metavar="FILE|JSON",
        help="algorithm config: a .json/.yaml/.yml file or an inline JSON object, "
        'e.g. \'{"lr": 0.001, "train_batch_size": 1000}\'; repeatable: merged in order, '
        "a later one overriding the keys it sets (nested dicts such as 'model' merged "
        "key by key, lists replaced)",
    )
    train.add_argument(
        "--stop",
        action="append",
        type=parse_stop,
        metavar="KEY=VALUE",
        help="stop when result[KEY] >= VALUE (repeatable; stops when ANY condition holds), "
        "e.g. episode_reward_mean=475, timesteps_total=1e6, training_iteration=100, "
        "time_total_s=600",
    )
    train.add_argument(
        "--num-evaluators",
        type=_non_negative_int,
        metavar="N",
        help="remote sampling actors (0: sample in this process, no Ray); "
        "overrides 'num_evaluators' in --config",
    )
    train.add_argument(
        "--output-dir",
        metavar="DIR",
        help="where results, checkpoints and the learning curve go "
        "(default: ./hierl_results/ALGO_ENV_YYYYmmdd-HHMMSS/)",
    )
    train.add_argument(
        "--checkpoint-freq",
        type=_non_negative_int,
        default=0,
        metavar="K",
        help="also checkpoint every K iterations (default 0: only at the end)",
    )
    train.add_argument(
        "--seed", type=int, metavar="S", help="random seed; overrides 'seed' in --config"
    )
    train.add_argument("--quiet", "-q", action="store_true", help="print only the final summary")
    train.set_defaults(func=cmd_train)

    rollout = sub.add_parser(
        "rollout",
        help="run a trained policy from a checkpoint",
        description=(
            "Load a checkpoint written by 'hierl train' and run episodes with its policy, "
            "printing each episode's return and the mean. CHECKPOINT may also be a run's "
            "output dir or its checkpoints/ dir (the latest checkpoint is used)."
        ),
    )
    rollout.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint directory")
    rollout.add_argument(
        "--episodes",
        type=_positive_int,
        default=10,
        metavar="N",
        help="episodes to run (default 10)",
    )
    rollout.add_argument(
        "--explore",
        action="store_true",
        help="sample actions stochastically (default: deterministic/greedy actions)",
    )
    rollout.add_argument("--seed", type=int, metavar="S", help="seed for the env and actions")
    rollout.add_argument(
        "--output",
        metavar="DIR",
        help="write whole episodes to DIR as logged data (Parquet, with each action's "
        "action_logp for off-policy estimation); actions are sampled, and the run's "
        "sub-envs may finish a few more than --episodes",
    )
    rollout.set_defaults(func=cmd_rollout)

    lst = sub.add_parser(
        "list",
        help="list algorithms",
        description="List the registered algorithms with their default policy optimizer "
        "and a one-line description.",
    )
    lst.add_argument("--names", action="store_true", help="only the names, one per line")
    lst.set_defaults(func=cmd_list)

    cfg = sub.add_parser(
        "config",
        help="show an algorithm's config keys",
        description="Show the config keys of an algorithm with their defaults and meaning "
        "(for 'hierl train --config').",
    )
    cfg.add_argument("algo", type=_algorithm, metavar="ALGO", help="algorithm name (any case)")
    cfg.set_defaults(func=cmd_config)

    tune = sub.add_parser(
        "tune",
        help="run Ray Tune experiments from a YAML file",
        description=textwrap.fill(
            "Run the experiments of a YAML experiment file with Ray Tune (search spaces, "
            "ASHA/HyperBand/PBT schedulers, checkpoints), showing Tune's progress, then a "
            "table of the best trials of each experiment. Every experiment is checked "
            "before the first trial starts. Format: see hierl/tune/experiments.py and "
            "examples/tune/.",
            width=79,
        ),
    )
    tune.add_argument("file", metavar="FILE", help="experiment file (.yaml)")
    tune.add_argument(
        "--storage-path",
        metavar="DIR",
        help="where Tune writes results and checkpoints (default: ~/ray_results)",
    )
    tune.add_argument(
        "--experiment",
        action="append",
        metavar="NAME",
        help="run only this experiment of the file (repeatable)",
    )
    tune.add_argument(
        "--stop",
        action="append",
        type=parse_stop,
        metavar="KEY=VALUE",
        help="replace every experiment's stop conditions (repeatable), e.g. training_iteration=5",
    )
    tune.add_argument("--ray-address", metavar="ADDR", help="join this Ray cluster")
    tune.add_argument(
        "--verbose", type=int, default=1, choices=[0, 1, 2], help="Tune's progress output"
    )
    tune.set_defaults(func=cmd_tune)

    bench = sub.add_parser(
        "bench",
        help="microbenchmarks (pick a policy optimizer for your hardware)",
        description="Run a microbenchmark; 'hierl bench optimizers --help' lists its options.",
    )
    bench.add_argument("target", choices=["optimizers"], help="what to benchmark")
    bench.add_argument("options", nargs=argparse.REMAINDER, help="the benchmark's options")
    bench.set_defaults(func=cmd_bench)
    return parser


# -- helpers ---------------------------------------------------------------------------
def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def load_config_arg(text: str) -> dict[str, Any]:
    """``--config``: a .json/.yaml/.yml file, or an inline JSON object string."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise CLIError(f"--config: invalid inline JSON: {e}") from None
    else:
        path = Path(text).expanduser()
        suffix = path.suffix.lower()
        if suffix not in (".json", ".yaml", ".yml"):
            if path.exists():
                raise CLIError(f"config file '{path}' must end in .json, .yaml or .yml")
            raise CLIError(
                f"--config {text!r} is neither a .json/.yaml/.yml file nor an inline JSON "
                "object (JSON objects start with '{')"
            )
        try:
            raw = path.read_text()
        except FileNotFoundError:
            raise CLIError(f"config file '{path}' does not exist") from None
        except (OSError, UnicodeDecodeError) as e:
            reason = getattr(e, "strerror", None) or str(e)
            raise CLIError(f"cannot read config file '{path}': {reason}") from None
        if suffix == ".json":
            try:
                data = json.loads(raw)
            except json.JSONDecodeError as e:
                raise CLIError(f"config file '{path}' is not valid JSON: {e}") from None
        else:
            import yaml

            from hierl.yaml_loader import load_yaml

            try:
                data = load_yaml(raw)  # also reads 1e-3 as a float
            except yaml.YAMLError as e:
                raise CLIError(f"config file '{path}' is not valid YAML: {e}") from None
            if data is None:
                data = {}
    if not isinstance(data, dict):
        raise CLIError(
            f"--config must hold a mapping of config keys to values, got {type(data).__name__}"
        )
    return data


def merge_configs(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``override``: nested dicts merged key by key, anything else
    (lists included) replaced; neither argument is modified."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_configs(out[key], value)
        else:
            out[key] = value
    return out


def default_stop(env: Any) -> tuple[dict[str, float], str]:
    """Stop conditions when none are given, and a note on where they come from."""
    threshold = None
    if isinstance(env, str):
        import gymnasium as gym

        spec = gym.registry.get(env)
        threshold = getattr(spec, "reward_threshold", None) if spec is not None else None
    if threshold is not None:
        return (
            {"episode_reward_mean": float(threshold), "timesteps_total": float(TIMESTEPS_CAP)},
            f"default: {env} reward_threshold, capped at {TIMESTEPS_CAP} timesteps",
        )
    return {"timesteps_total": float(TIMESTEPS_CAP)}, "default: no reward_threshold for this env"


def describe_stop(stop: Mapping[str, float]) -> str:
    from hierl.progress import format_target

    return ", ".join(f"{k} >= {format_target(v)}" for k, v in stop.items())


def check_stop_keys(stop: Mapping[str, float], result: Mapping[str, Any]) -> None:
    """Every stop key must be a numeric entry of the result dict."""
    from hierl.config import suggest

    available = sorted(k for k, v in result.items() if _is_number(v))
    for key in stop:
        if key not in result:
            raise CLIError(
                f"unknown stop key '{key}': not in the training results"
                f"{suggest(key, available)}; available keys: {', '.join(available)}"
            )
        if not _is_number(result[key]):
            raise CLIError(
                f"stop key '{key}' is not numeric (value {result[key]!r}); "
                f"numeric keys: {', '.join(available)}"
            )


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def reached_stop(stop: Mapping[str, float], result: Mapping[str, Any]) -> str | None:
    """The first condition ``result[key] >= target`` that holds, described; else None."""
    from hierl.progress import format_target

    for key, target in stop.items():
        try:
            value = float(result.get(key, math.nan))
        except (TypeError, ValueError):
            continue
        if value >= target:  # NaN never reaches a target
            return f"{key} = {value:g} >= {format_target(target)}"
    return None


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "env"


def default_output_dir(algo: str, env: Any) -> Path:
    env_name = env if isinstance(env, str) else getattr(env, "__name__", "env")
    base = Path("hierl_results") / f"{algo}_{_safe_name(env_name)}_{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        path = base.with_name(f"{base.name}-{n}")
        n += 1
    return path


def write_learning_curve(
    results: Sequence[Mapping[str, Any]],
    path: str | os.PathLike,
    title: str,
    reward_target: float | None = None,
) -> Path:
    """Plot episode_reward_mean (min/max band) against timesteps_total to a PNG."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state touched

    def col(key: str) -> list[float]:
        out = []
        for r in results:
            try:
                out.append(float(r.get(key, math.nan)))
            except (TypeError, ValueError):
                out.append(math.nan)
        return out

    xs = col("timesteps_total")
    mean, lo, hi = col("episode_reward_mean"), col("episode_reward_min"), col("episode_reward_max")
    fig = Figure(figsize=(7, 4.5), dpi=100)
    ax = fig.add_subplot()
    if xs:
        ax.fill_between(xs, lo, hi, alpha=0.25, label="episode reward min/max")
        ax.plot(xs, mean, marker="o" if len(xs) <= 30 else None, label="episode_reward_mean")
    if reward_target is not None:
        ax.axhline(reward_target, linestyle="--", color="grey", label=f"target {reward_target:g}")
    ax.set_xlabel("timesteps_total")
    ax.set_ylabel("episode reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if xs or reward_target is not None:
        ax.legend(loc="best")
    fig.tight_layout()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)
    return path


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A checkpoint dir as given, or the latest one under a run dir / checkpoints dir."""
    from hierl.checkpoint import META_FILE

    p = Path(path).expanduser()
    if (p / META_FILE).exists() or not p.is_dir():
        return p
    if (p / CHECKPOINTS_DIR).is_dir():
        p = p / CHECKPOINTS_DIR
    found = sorted(c for c in p.iterdir() if c.is_dir() and (c / META_FILE).exists())
    return found[-1] if found else p


# -- commands --------------------------------------------------------------------------
def _trainer_class(name: str) -> type:
    from hierl.algorithms.registry import get_trainer_class
    from hierl.config import ConfigError

    try:
        return get_trainer_class(name)
    except ConfigError as e:
        raise CLIError(str(e)) from None


def cmd_list(args: argparse.Namespace) -> int:
    from hierl.algorithms.registry import describe

    names = _algorithm_names()
    if args.names:
        print("\n".join(names))
        return 0
    rows = [(name, _default_optimizer(name), describe(name)) for name in names]
    width = max(len(name) for name in names)
    print(f"{'ALGORITHM':<{width}}  {'OPTIMIZER':<9}  DESCRIPTION")
    for name, optimizer, description in rows:
        print(f"{name:<{width}}  {optimizer:<9}  {description}")
    return 0


def _default_optimizer(name: str) -> str:
    """The policy optimizer ``name`` uses unless told otherwise ("-": a nested trainer
    that drives whole trainers, not one optimizer)."""
    config_class = _trainer_class(name).config_class
    return getattr(config_class, "default_optimizer", None) or "-"


def cmd_config(args: argparse.Namespace) -> int:
    from hierl.config import field_docs

    cls = _trainer_class(args.algo)
    config_class = cls.config_class
    config = config_class.from_dict({})
    print(f"{args.algo} config keys ({config_class.__name__}), set with --config '{{...}}':")
    _print_fields(config.to_dict(), field_docs(config_class), "  ")
    opt_config = getattr(config, "optimizer_config", None)
    if opt_config is not None:
        print(
            f"  optimizer_config of '{config.optimizer}' ({type(opt_config).__name__}; supported "
            f"optimizers: {', '.join(config_class.supported_optimizers)}), also as flat keys:"
        )
        _print_fields(opt_config.to_dict(), field_docs(type(opt_config)), "    ")
    return 0


def _print_fields(values: dict[str, Any], docs: dict[str, str], indent: str) -> None:
    for key, value in values.items():
        if key == "optimizer_config":
            continue  # listed with its own docs below
        print(f"{indent}{key} = {json.dumps(value, default=str)}")
        if docs.get(key):
            print(f"{indent}    {_one_line(docs[key])}")


def cmd_tune(args: argparse.Namespace) -> int:
    """Run the experiments of a YAML file with Ray Tune; print the best trials."""
    from rich.console import Console
    from rich.table import Table

    from hierl.config import ConfigError
    from hierl.evaluators.ray_runtime import ensure_ray
    from hierl.tune.experiments import load_experiments, run_experiment, summary_rows

    try:
        experiments = load_experiments(args.file)
    except ConfigError as e:
        raise CLIError(str(e)) from None
    if args.experiment:
        unknown = [n for n in args.experiment if n not in experiments]
        if unknown:
            raise CLIError(
                f"no experiment {unknown} in '{args.file}'; it has: {', '.join(experiments)}"
            )
        experiments = {n: experiments[n] for n in args.experiment}
    if args.stop:
        for spec in experiments.values():
            spec.stop = dict(args.stop)
    ensure_ray(args.ray_address)
    table = Table(title="best trials")
    for column in ("experiment", "trial", "status", "metric", "iterations", "timesteps", "config"):
        table.add_column(column)
    failed = 0
    for name, spec in experiments.items():
        try:
            results = run_experiment(name, spec, args.storage_path, verbose=args.verbose)
        except ConfigError as e:  # e.g. a trial that can never be placed on this cluster
            raise CLIError(str(e)) from None
        failed += sum(1 for r in results if r.error)
        for row in summary_rows(name, spec, results):
            value = row[spec.metric]
            table.add_row(
                row["experiment"],
                str(row["trial"]),
                row["status"],
                f"{spec.metric} = {value:.4g}" if _is_number(value) else f"{spec.metric} = -",
                str(row["iterations"]),
                str(row["timesteps"]),
                ", ".join(f"{k}={v}" for k, v in row["config"].items()),
            )
    console = Console()
    if not console.is_terminal:  # a log file: no need to squeeze the table into 80 columns
        console = Console(width=160)
    console.print(table)
    if failed:
        print(f"hierl: {failed} trial(s) failed; see Tune's error files above", file=sys.stderr)
    return 1 if failed else 0


def cmd_bench(args: argparse.Namespace) -> int:
    """``hierl bench optimizers ...``: the optimizer microbenchmarks."""
    from hierl.optimizer_bench import main as bench_main

    try:
        return bench_main(args.options, parser_class=_Parser)
    except SystemExit as e:  # its --help
        return e.code if isinstance(e.code, int) else 0


def cmd_train(args: argparse.Namespace) -> int:
    from hierl.config import ConfigError

    cls = _trainer_class(args.algo)

    config: dict[str, Any] = {}
    for text in args.config or []:  # later --config values override earlier ones
        config = merge_configs(config, load_config_arg(text))
    if args.env is not None:
        config["env"] = args.env
    if args.num_evaluators is not None:
        config["num_evaluators"] = args.num_evaluators
    if args.seed is not None:
        config["seed"] = args.seed
    if config.get("env") is None:
        raise CLIError("no environment: pass --env ID (e.g. --env CartPole-v1) or set 'env'")
    try:
        trainer_config = cls.config_class.from_dict(config)
    except ValueError as e:  # ConfigError and checks raised by the config itself
        raise CLIError(str(e)) from None
    env = trainer_config.env
    _check_env(env, getattr(trainer_config, "preprocessor_pref", "deepmind"))

    if args.stop:
        stop, stop_note = dict(args.stop), ""
    else:
        stop, stop_note = default_stop(env)

    if args.output_dir is not None:
        out_dir = Path(args.output_dir).expanduser()
        if out_dir.exists() and not out_dir.is_dir():
            raise CLIError(f"--output-dir '{out_dir}' exists and is not a directory")
        results_path = out_dir / RESULTS_FILE
        if results_path.exists() and results_path.stat().st_size > 0:
            raise CLIError(
                f"output dir '{out_dir}' already holds a run ({RESULTS_FILE}); "
                "choose another --output-dir"
            )
    else:
        out_dir = default_output_dir(args.algo, env)

    env_name = env if isinstance(env, str) else getattr(env, "__name__", repr(env))
    title = f"{args.algo} on {env_name}"
    if not args.quiet:
        print(f"{PROG}: training {title}; output dir {out_dir.resolve()}", flush=True)
        note = f" ({stop_note})" if stop_note else ""
        print(f"stop when any of: {describe_stop(stop)}{note}", flush=True)

    try:
        trainer = cls(trainer_config)
    except ConfigError as e:
        raise CLIError(str(e)) from None
    interrupted = False
    try:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CLIError(f"cannot create output dir '{out_dir}': {e.strerror or e}") from None
        (out_dir / PARAMS_FILE).write_text(
            json.dumps(trainer.config.to_dict(), indent=2, default=str) + "\n"
        )
        return _train_loop(trainer, args, stop, out_dir, title)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        try:
            trainer.stop()
        except Exception as e:
            if not interrupted:
                raise
            print(
                f"{PROG}: warning: stopping the trainer failed: {_one_line(str(e))}",
                file=sys.stderr,
            )


def _check_env(env: Any, preprocessor_pref: str) -> None:
    from hierl.evaluators.env import resolve_env_creator

    try:
        resolve_env_creator(env, preprocessor_pref)
    except ValueError as e:
        raise CLIError(str(e)) from None


def _train_loop(
    trainer: Any,
    args: argparse.Namespace,
    stop: Mapping[str, float],
    out_dir: Path,
    title: str,
) -> int:
    from hierl.progress import TrainingProgress, format_number

    results_path = out_dir / RESULTS_FILE
    reward_target = stop.get("episode_reward_mean")
    history: list[dict[str, Any]] = []
    last_saved: int | None = None
    reason: str | None = None
    interrupted = False
    ckpt_root = out_dir / CHECKPOINTS_DIR

    def checkpoint() -> Path:
        nonlocal last_saved
        path = trainer.save(ckpt_root / f"{trainer.iteration:06d}")
        last_saved = trainer.iteration
        write_learning_curve(history, out_dir / CURVE_FILE, title, reward_target)
        return path

    with TrainingProgress(stop, title=title, quiet=args.quiet) as progress:
        try:
            while True:
                result = trainer.train()
                with open(results_path, "a") as f:
                    f.write(json.dumps(result, default=float) + "\n")
                history.append(
                    {
                        k: result.get(k)
                        for k in (
                            "timesteps_total",
                            "episode_reward_mean",
                            "episode_reward_min",
                            "episode_reward_max",
                        )
                    }
                )
                progress.update(result)
                if len(history) == 1:
                    check_stop_keys(stop, result)
                if args.checkpoint_freq and trainer.iteration % args.checkpoint_freq == 0:
                    progress.log(f"checkpoint saved: {checkpoint().resolve()}")
                reason = reached_stop(stop, result)
                if reason is not None:
                    break
        except KeyboardInterrupt:
            interrupted = True

    ckpt_path = ckpt_root / f"{trainer.iteration:06d}"
    if interrupted or last_saved != trainer.iteration:
        ckpt_path = checkpoint()
    else:
        write_learning_curve(history, out_dir / CURVE_FILE, title, reward_target)
    last = history[-1] if history else {}
    timesteps = format_number(last.get("timesteps_total"), "d")
    stats = (
        f"{trainer.iteration} iterations, {timesteps} timesteps, "
        f"episode_reward_mean {format_number(last.get('episode_reward_mean'))}, "
        f"{trainer.time_total_s:.1f}s"
    )
    if interrupted:
        print(f"{PROG}: {title} interrupted after {stats}")
    else:
        print(f"{PROG}: {title} done ({reason}) after {stats}")
    print(f"checkpoint: {ckpt_path.resolve()}")
    print(f"output dir: {out_dir.resolve()}", flush=True)
    return 0


def cmd_rollout(args: argparse.Namespace) -> int:
    from hierl.algorithms.registry import get_trainer_class
    from hierl.algorithms.trainer import Trainer
    from hierl.checkpoint import CheckpointError, load_checkpoint
    from hierl.config import ConfigError

    path = resolve_checkpoint(args.checkpoint)
    try:
        algo = str(load_checkpoint(path)[0].get("algorithm"))
        if not issubclass(get_trainer_class(algo), Trainer):
            raise CLIError(
                f"rollout serves one policy, but '{path}' is a checkpoint of the nested "
                f"algorithm {algo}; load it in Python with BaseTrainer.from_checkpoint"
            )
        overrides: dict[str, Any] = {}
        if args.output:
            overrides = {
                "output": args.output,
                "batch_mode": "complete_episodes",
                "rollout_fragment_length": 1,
            }
        trainer = Trainer.from_checkpoint(path, num_evaluators=0, **overrides)
    except (CheckpointError, ConfigError) as e:
        raise CLIError(str(e)) from None
    if args.seed is not None:
        from hierl.utils import seed_everything

        seed_everything(args.seed)
    try:
        if args.output:
            returns = _record_episodes(trainer, args)
        else:
            env = _make_rollout_env(trainer.config)
            try:
                returns = _run_episodes(trainer, env, args)
            finally:
                env.close()
    finally:
        trainer.stop()  # also finishes the output files
    mean = sum(returns) / len(returns)
    print(f"mean return: {mean:.2f} over {len(returns)} episodes", flush=True)
    if args.output:
        print(f"logged data: {Path(args.output).resolve()}", flush=True)
    return 0


def _print_episode(number: int, total: float, length: int) -> None:
    print(f"episode {number}: return {total:.2f}, length {length}", flush=True)


def _record_episodes(trainer: Any, args: argparse.Namespace) -> list[float]:
    """Play whole episodes with sampled actions, writing each one, until at least
    ``args.episodes`` (the last batch's other sub-envs may finish more)."""
    evaluator = trainer.local_evaluator
    evaluator.reset_sampler()  # whole episodes only, not the checkpoint's current ones
    returns: list[float] = []
    while len(returns) < args.episodes:
        evaluator.sample_env()
        for record in evaluator.get_metrics():
            returns.append(record.episode_reward)
            _print_episode(len(returns), record.episode_reward, record.episode_length)
    return returns


def _make_rollout_env(config: Any) -> Any:
    from hierl.evaluators.env import resolve_env_creator
    from hierl.evaluators.rollout import EnvKindError, make_episode_env

    try:
        creator = resolve_env_creator(config.env, getattr(config, "preprocessor_pref", "deepmind"))
    except ValueError as e:
        raise CLIError(str(e)) from None
    name = config.env if isinstance(config.env, str) else getattr(config.env, "__name__", "env")
    try:
        return make_episode_env(creator, config.env_config, env_id=name)
    except EnvKindError as e:
        hint = ""
        if e.kind is not None and e.kind.multi_agent:
            hint = " (roll it out from Python: Trainer.compute_single_action(obs, policy_id=...))"
        raise CLIError(f"rollout runs single-agent envs: {e}{hint}") from None


def _run_episodes(trainer: Any, env: Any, args: argparse.Namespace) -> list[float]:
    if args.seed is not None:
        env.action_space.seed(args.seed)
    # recurrent policies carry their state through each episode
    player = trainer.local_evaluator.episode_player(env)
    returns = []
    for i in range(args.episodes):
        played = player.play(seed=args.seed if i == 0 else None, explore=args.explore)
        total, length = played.record.episode_reward, played.record.episode_length
        returns.append(total)
        _print_episode(i + 1, total, length)
    return returns


# -- entry point -----------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """Run the ``hierl`` command line; returns the exit status."""
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help and --version
            sys.stdout.flush()  # here, so that a closed pipe is caught below
            return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
        status = int(args.func(args))
        sys.stdout.flush()
        return status
    except CLIError as e:
        print(f"{PROG}: error: {_one_line(str(e))}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr, flush=True)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `hierl config PPO | head`): no traceback.
        # See "Note on SIGPIPE" in the docs of the signal module: point stdout at
        # devnull so the interpreter's final flush cannot fail again.
        _stdout_to_devnull()
        return 1


def _stdout_to_devnull() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a non-file (tests)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())

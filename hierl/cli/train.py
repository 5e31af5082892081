"""``hierl train``: configs from files, JSON and ``--set``, stop conditions, the output
directory and its logs, the training loop, ``--resume``."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hierl.cli.common import (
    CHECKPOINTS_DIR,
    PROG,
    CLIError,
    add_allow_import,
    algorithm,
    algorithm_names,
    check_env,
    env_name,
    is_number,
    non_negative_int,
    one_line,
    trainer_class,
)
from hierl.cli.experiment_file import is_experiment_file, train_experiment
from hierl.files import atomic_write
from hierl.loggers import RESULTS_FILE

TIMESTEPS_CAP = 1_000_000
"""Safety cap added to the default stop conditions."""


PARAMS_FILE = "params.json"


RUN_FILE = "run.json"
"""What ``--resume`` needs besides the checkpoint: the stop conditions and checkpoint
frequency of the run."""


CURVE_FILE = "learning_curve.png"


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


def parse_set(text: str) -> tuple[tuple[str, ...], Any]:
    """Parse one ``--set KEY.SUB=VALUE`` into ``(("KEY", "SUB"), value)``; the value is
    read as YAML (``1e-3``, ``true``, ``null``, ``[32, 32]``; anything else a string)."""
    import yaml

    from hierl.yaml_loader import load_yaml

    key, sep, value = text.partition("=")
    path = tuple(part.strip() for part in key.split("."))
    if not sep or not all(path):
        raise argparse.ArgumentTypeError(
            f"malformed override {text!r}: expected KEY=VALUE with KEY a config key or a "
            "dotted path into nested keys, e.g. lr=1e-3 or model.hiddens=[32,32]"
        )
    try:
        parsed = load_yaml(value)
    except yaml.YAMLError as e:
        raise argparse.ArgumentTypeError(
            f"override {text!r}: value {value!r} is not valid YAML: {one_line(str(e))}"
        ) from None
    return path, parsed


def apply_overrides(
    config: Mapping[str, Any], overrides: Sequence[tuple[tuple[str, ...], Any]]
) -> dict[str, Any]:
    """``config`` with each ``(path, value)`` of ``--set`` applied in order (nested dicts
    created along the path; the config's own ``from_dict`` checks keys and types later)."""
    out = dict(config)
    for path, value in overrides:
        node = out
        for part in path[:-1]:
            child = node.get(part)
            node[part] = child = dict(child) if isinstance(child, Mapping) else {}
            node = child
        node[path[-1]] = value
    return out


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
    from hierl.cli.progress import format_target

    return ", ".join(f"{k} >= {format_target(v)}" for k, v in stop.items())


def check_stop_keys(stop: Mapping[str, float], result: Mapping[str, Any]) -> None:
    """Every stop key must be a numeric entry of the result dict."""
    from hierl.config import suggest

    available = sorted(k for k, v in result.items() if is_number(v))
    for key in stop:
        if key not in result:
            raise CLIError(
                f"unknown stop key '{key}': not in the training results"
                f"{suggest(key, available)}; available keys: {', '.join(available)}"
            )
        if not is_number(result[key]):
            raise CLIError(
                f"stop key '{key}' is not numeric (value {result[key]!r}); "
                f"numeric keys: {', '.join(available)}"
            )


def reached_stop(stop: Mapping[str, float], result: Mapping[str, Any]) -> str | None:
    """The first condition ``result[key] >= target`` that holds, described; else None."""
    from hierl.cli.progress import format_target

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
    return atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))


def add_train_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hierl train`` (its options, help and handler) to the subcommands ``sub``."""
    algos = ", ".join(algorithm_names())
    train = sub.add_parser(
        "train",
        help="train an algorithm on an environment",
        description=textwrap.fill(
            "Train an algorithm until a stop condition holds, logging every iteration to "
            "OUTPUT_DIR/result.jsonl, progress.csv and TensorBoard event files (named as "
            "Ray Tune names them: tensorboard --logdir OUTPUT_DIR), saving checkpoints and "
            "a learning curve. Ctrl-C stops training cleanly after saving a final "
            "checkpoint; --resume OUTPUT_DIR continues a run from its last complete "
            "checkpoint (after Ctrl-C, a crash or a kill).",
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
            "      --checkpoint-freq 10\n"
            "  hierl train --algo PPO --env ALE/Pong-v5 --config examples/tuned/pong-ppo.yaml\n"
            "  hierl train --resume hierl_results/PPO_CartPole-v1_20250101-120000 \\\n"
            "      --stop timesteps_total=1e6\n\n"
            "Config sources apply in order: --config files/objects, then --set, then "
            "--env/--seed/\n--num-evaluators. Without --config, the tuned file of "
            "examples/tuned/ for --algo on --env\n(if there is one) is used, as if "
            "given with --config; --config '{}' opts out.\n"
            "Without --stop, training stops when episode_reward_mean reaches the env's "
            f"reward_threshold\n(if it has one) or timesteps_total reaches {TIMESTEPS_CAP}."
        ),
    )
    train.add_argument(
        "--algo",
        type=algorithm,
        metavar="ALGO",
        help=f"algorithm name, any case (one of: {algos}); required unless --resume or "
        "an experiment file in --config gives it",
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
        "key by key, lists replaced). An experiment file (as for 'hierl tune', e.g. "
        "examples/tuned/*.yaml) gives its experiment's algorithm, env, stop conditions, "
        "checkpoint frequency and config; --algo, --env, --stop, --checkpoint-freq, "
        "--seed, --set and later --config values override them",
    )
    train.add_argument(
        "--experiment",
        metavar="NAME",
        help="the experiment to train from an experiment file that holds several",
    )
    train.add_argument(
        "--set",
        action="append",
        type=parse_set,
        dest="overrides",
        metavar="KEY=VALUE",
        help="set one config key after --config, a dotted path into nested keys; VALUE is "
        "read as YAML (numbers, true/false, null, [lists], strings), e.g. "
        "--set model.hiddens=[32,32] --set lr=1e-3 (repeatable)",
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
        type=non_negative_int,
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
        type=non_negative_int,
        metavar="K",
        help="also checkpoint every K iterations (default 0: only at the end; with "
        "--resume: the run's own)",
    )
    train.add_argument(
        "--seed", type=int, metavar="S", help="random seed; overrides 'seed' in --config"
    )
    train.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the run in output dir DIR from its last complete checkpoint, with "
        "its saved config (a corrupt last checkpoint: the one before), appending to its "
        "logs after dropping the rows logged after that checkpoint; stop conditions count "
        "from the start of the run. Only --stop (e.g. to extend the run), "
        "--checkpoint-freq, --ray-address, --no-curve and --quiet may be given with it",
    )
    train.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="join this Ray cluster (e.g. 10.0.0.1:6379) instead of starting a local one; "
        "overrides 'ray_address' in --config",
    )
    train.add_argument(
        "--no-curve",
        action="store_true",
        help=f"do not plot {CURVE_FILE} (spares matplotlib's import, about 0.5 s)",
    )
    train.add_argument("--quiet", "-q", action="store_true", help="print only the final summary")
    add_allow_import(train)
    train.set_defaults(func=cmd_train)
    return train


def cmd_train(args: argparse.Namespace) -> int:
    """``hierl train``: a new run, or ``--resume`` of one."""
    if args.resume is not None:
        return _resume_train(args)
    from hierl.algorithms.registry import canonical_name
    from hierl.config import ConfigError

    _use_tuned_file(args)
    config: dict[str, Any] = {}
    experiment = None
    for text in args.config or []:  # later --config values override earlier ones
        loaded = load_config_arg(text)
        if is_experiment_file(loaded):
            if experiment is not None:
                raise CLIError(
                    f"--config {text!r} is a second experiment file (after experiment "
                    f"'{experiment.name}'): give one, with other --config values for configs"
                )
            experiment = train_experiment(text, args.experiment)
            loaded = experiment.config
        config = merge_configs(config, loaded)
    if args.experiment is not None and experiment is None:
        raise CLIError(
            f"--experiment {args.experiment!r} names an experiment of an experiment file: "
            "pass the file with --config FILE"
        )
    algo = args.algo or (experiment.algo if experiment else None)
    if algo is None:
        raise CLIError(
            "the following arguments are required: --algo (or --config with an experiment "
            "file, or --resume DIR to continue a run)"
        )
    cls = trainer_class(algo)
    algo = canonical_name(algo)  # an experiment's 'run: ppo' is PPO
    config = apply_overrides(config, args.overrides or [])
    if args.env is not None:
        config["env"] = args.env
    if args.num_evaluators is not None:
        config["num_evaluators"] = args.num_evaluators
    if args.seed is not None:
        config["seed"] = args.seed
    if args.ray_address is not None:
        config["ray_address"] = args.ray_address
    if config.get("env") is None:
        raise CLIError("no environment: pass --env ID (e.g. --env CartPole-v1) or set 'env'")
    if config.get("logdir") is not None:
        raise CLIError(
            f"config key 'logdir' = {config['logdir']!r} is for trainers built in Python: "
            "hierl train writes result.jsonl, progress.csv and TensorBoard events to its "
            "output dir (--output-dir)"
        )
    try:
        trainer_config = cls.config_class.from_dict(config)
    except ValueError as e:  # ConfigError and checks raised by the config itself
        raise CLIError(str(e)) from None
    env = trainer_config.env
    check_env(env, getattr(trainer_config, "preprocessor_pref", "deepmind"))

    if args.stop:
        stop, stop_note = dict(args.stop), ""
    elif experiment is not None and experiment.stop:
        stop, stop_note = experiment.stop, f"experiment '{experiment.name}'"
    else:
        stop, stop_note = default_stop(env)
    checkpoint_freq = args.checkpoint_freq
    if checkpoint_freq is None:
        checkpoint_freq = experiment.checkpoint_freq if experiment is not None else 0

    if args.output_dir is not None:
        out_dir = Path(args.output_dir).expanduser()
        if out_dir.exists() and not out_dir.is_dir():
            raise CLIError(f"--output-dir '{out_dir}' exists and is not a directory")
        results_path = out_dir / RESULTS_FILE
        if results_path.exists() and results_path.stat().st_size > 0:
            raise CLIError(
                f"output dir '{out_dir}' already holds a run ({RESULTS_FILE}); continue it "
                f"with 'hierl train --resume {out_dir}' or choose another --output-dir"
            )
    else:
        out_dir = default_output_dir(algo, env)

    title = f"{algo} on {env_name(env)}"
    if not args.quiet:
        print(f"{PROG}: training {title}; output dir {out_dir.resolve()}", flush=True)
        if experiment is not None and experiment.ignored:
            print(
                f"{PROG}: experiment '{experiment.name}': one run; its "
                f"{', '.join(experiment.ignored)} apply with 'hierl tune'",
                flush=True,
            )
        note = f" ({stop_note})" if stop_note else ""
        print(f"stop when any of: {describe_stop(stop)}{note}", flush=True)

    try:
        trainer = cls(trainer_config)
    except ConfigError as e:
        raise CLIError(str(e)) from None

    def start() -> None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CLIError(f"cannot create output dir '{out_dir}': {e.strerror or e}") from None
        _write_json(out_dir / PARAMS_FILE, trainer.config.to_dict())

    return _run_training(trainer, args, stop, checkpoint_freq, out_dir, title, [], start)


def _use_tuned_file(args: argparse.Namespace) -> None:
    """With --algo and --env and no --config: train with the tuned file for that task, if
    ``examples/tuned/`` has one (the first by file name), saying so and how to opt out."""
    if args.config or args.algo is None or args.env is None:
        return
    from hierl.cli.experiment_file import tuned_experiments

    found = tuned_experiments(args.algo, args.env)
    if not found:
        return
    (path, name), others = found[0], [p.name for p, _ in found[1:]]
    args.config, args.experiment = [str(path)], name
    if not args.quiet:
        also = f" (also for this task: {', '.join(others)})" if others else ""
        print(
            f"{PROG}: using the tuned settings for {args.algo} on {args.env} in {path}{also}; "
            f"--config '{{}}' trains with {args.algo}'s plain defaults",
            flush=True,
        )


def _resume_train(args: argparse.Namespace) -> int:
    """``hierl train --resume DIR``: the run in DIR, from its last complete checkpoint."""
    from hierl.algorithms.trainer_base import BaseTrainer
    from hierl.checkpoint import CheckpointError, latest_complete_checkpoint
    from hierl.config import ConfigError
    from hierl.loggers import truncate_logs

    changing = {
        "--config": args.config,
        "--set": args.overrides,
        "--env": args.env,
        "--seed": args.seed,
        "--num-evaluators": args.num_evaluators,
        "--output-dir": args.output_dir,
        "--experiment": args.experiment,
    }
    for flag, value in changing.items():
        if value is not None:
            raise CLIError(
                f"--resume continues a run with its saved config; {flag} would change it "
                "(only --stop, --checkpoint-freq, --ray-address, --no-curve and --quiet go "
                "with --resume; to train with other settings, start a new run from the old "
                "one's: hierl train --algo ALGO --config DIR/params.json --set KEY=VALUE)"
            )
    run_dir = Path(args.resume).expanduser()
    if not run_dir.is_dir():
        raise CLIError(f"--resume '{run_dir}': no such directory (give a 'hierl train' output dir)")
    try:
        path, meta, skipped = latest_complete_checkpoint(run_dir / CHECKPOINTS_DIR)
    except CheckpointError as e:
        raise CLIError(
            f"cannot resume '{run_dir}': {e} ('hierl train' checkpoints at the end, on "
            "Ctrl-C and every --checkpoint-freq iterations)"
        ) from None
    algo = str(meta.get("algorithm"))
    if args.algo is not None and args.algo != algo:
        raise CLIError(
            f"--algo {args.algo} does not match the run in '{run_dir}': its checkpoint "
            f"'{path}' is of algorithm {algo} (drop --algo, or pass --algo {algo})"
        )
    for bad, why in skipped:
        print(
            f"{PROG}: warning: checkpoint '{bad}' is unusable ({one_line(why)}); "
            f"resuming from '{path}'",
            file=sys.stderr,
            flush=True,
        )
    saved = _read_run_info(run_dir)
    overrides = {} if args.ray_address is None else {"ray_address": args.ray_address}
    try:
        trainer = BaseTrainer.from_checkpoint(path, allow_imports=args.allow_import, **overrides)
    except (CheckpointError, ConfigError) as e:
        raise CLIError(f"cannot resume '{run_dir}': {e}") from None
    try:
        env = trainer.config.env
        if args.stop:
            stop, stop_note = dict(args.stop), ""
        elif "stop" in saved:
            stop, stop_note = saved["stop"], "the run's"
        else:
            stop, stop_note = default_stop(env)
        freq = args.checkpoint_freq
        if freq is None:
            freq = int(saved.get("checkpoint_freq", 0))
        # the logs must match the restored state: drop what came after the checkpoint
        kept = truncate_logs(run_dir, trainer.iteration)
        title = f"{algo} on {env_name(env)}"
        last = kept[-1] if kept else None
        if last is not None and last.get("training_iteration") == trainer.iteration:
            reason = reached_stop(stop, last)
            if reason is not None:
                print(
                    f"{PROG}: {title} already done ({reason}) at iteration {trainer.iteration}"
                    "; pass --stop to train on"
                )
                trainer.stop()
                return 0
        if not args.quiet:
            print(
                f"{PROG}: resuming {title} from checkpoint {path.resolve()} (iteration "
                f"{trainer.iteration}); output dir {run_dir.resolve()}",
                flush=True,
            )
            note = f" ({stop_note})" if stop_note else ""
            print(f"stop when any of: {describe_stop(stop)}{note}", flush=True)
    except BaseException:
        trainer.stop()
        raise
    return _run_training(trainer, args, stop, freq, run_dir, title, kept, lambda: None)


def _write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(data, indent=2, default=str) + "\n"))


def _read_run_info(run_dir: Path) -> dict[str, Any]:
    """The run's saved stop conditions and checkpoint frequency ({} if none saved)."""
    try:
        info = json.loads((run_dir / RUN_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    if not isinstance(info, dict):
        return {}
    stop = info.get("stop")
    if not isinstance(stop, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in stop.values()
    ):
        info.pop("stop", None)
    return info


def _run_training(
    trainer: Any,
    args: argparse.Namespace,
    stop: Mapping[str, float],
    checkpoint_freq: int,
    out_dir: Path,
    title: str,
    history: list[dict[str, Any]],
    start: Callable[[], None],
) -> int:
    """Run ``start()`` (which prepares ``out_dir``), record the run's stop conditions,
    train, and always stop the trainer."""
    interrupted = False
    try:
        start()
        _write_json(
            out_dir / RUN_FILE,
            {"algorithm": trainer.name, "stop": dict(stop), "checkpoint_freq": checkpoint_freq},
        )
        return _train_loop(trainer, args, stop, checkpoint_freq, out_dir, title, history)
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
                f"{PROG}: warning: stopping the trainer failed: {one_line(str(e))}",
                file=sys.stderr,
            )


class StopAfterIteration:
    """While entered (in the main thread), the first Ctrl-C (SIGINT) asks the training
    loop to stop after the iteration in progress, so the final checkpoint is taken between
    iterations and never from a ``train()`` cut midway (nor from Ray calls cut midway); a
    second Ctrl-C interrupts at once (``KeyboardInterrupt``)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        # a raw write: the main thread may be inside a buffered write to stderr
        os.write(2, f"{PROG}: stopping after this iteration (Ctrl-C again: now)\n".encode())

    def __enter__(self) -> StopAfterIteration:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:  # None: a handler not set from Python; the default then
            signal.signal(
                signal.SIGINT, signal.SIG_DFL if self._previous is None else self._previous
            )


CURVE_KEYS = ("timesteps_total", "episode_reward_mean", "episode_reward_min", "episode_reward_max")
"""The result keys the learning curve plots."""


def _train_loop(
    trainer: Any,
    args: argparse.Namespace,
    stop: Mapping[str, float],
    checkpoint_freq: int,
    out_dir: Path,
    title: str,
    history: list[dict[str, Any]],
) -> int:
    """Train until a stop condition holds or Ctrl-C, logging every result (``history``:
    the run's results so far, for the learning curve), checkpointing every
    ``checkpoint_freq`` iterations and at the end."""
    from hierl.cli.progress import TrainingProgress, episode_stats, format_number
    from hierl.loggers import ResultLogger

    reward_target = stop.get("episode_reward_mean")
    history = [{k: r.get(k) for k in CURVE_KEYS} for r in history]
    last_saved: int | None = None
    reason: str | None = None
    interrupted = False
    ckpt_root = out_dir / CHECKPOINTS_DIR

    def curve() -> None:
        if not args.no_curve:
            write_learning_curve(history, out_dir / CURVE_FILE, title, reward_target)

    def checkpoint() -> Path:
        nonlocal last_saved
        path = trainer.save(ckpt_root / f"{trainer.iteration:06d}")
        last_saved = trainer.iteration
        curve()
        return path

    first = True
    with (
        ResultLogger(out_dir) as log,
        TrainingProgress(stop, title=title, quiet=args.quiet) as progress,
    ):
        try:
            with StopAfterIteration() as ctrl_c:
                while True:
                    result = trainer.train()
                    log.log(result)
                    history.append({k: result.get(k) for k in CURVE_KEYS})
                    progress.update(result)
                    if first:
                        check_stop_keys(stop, result)
                        first = False
                    if checkpoint_freq and trainer.iteration % checkpoint_freq == 0:
                        progress.log(f"checkpoint saved: {checkpoint().resolve()}")
                    reason = reached_stop(stop, result)
                    if reason is not None:
                        break
                    if ctrl_c.requested:
                        interrupted = True
                        break
        except KeyboardInterrupt:
            interrupted = True

    ckpt_path = ckpt_root / f"{trainer.iteration:06d}"
    if interrupted or last_saved != trainer.iteration:
        ckpt_path = checkpoint()
    else:
        curve()
    last = history[-1] if history else {}
    timesteps = format_number(last.get("timesteps_total"), "d")
    # offline algorithms play no training episodes: their evaluation return stands in
    label, episodes = episode_stats(progress.last or last)
    reward_key = "episode_reward_mean" if label == "reward" else "evaluation/episode_reward_mean"
    stats = (
        f"{trainer.iteration} iterations, {timesteps} timesteps, "
        f"{reward_key} {format_number(episodes.get('episode_reward_mean'))}, "
        f"{trainer.time_total_s:.1f}s"
    )
    if interrupted:
        print(f"{PROG}: {title} interrupted after {stats}")
    else:
        print(f"{PROG}: {title} done ({reason}) after {stats}")
    print(f"checkpoint: {ckpt_path.resolve()}")
    print(f"output dir: {out_dir.resolve()}", flush=True)
    return 0

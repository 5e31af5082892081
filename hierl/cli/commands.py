"""The ``hierl`` commands besides ``train``: ``list``, ``config``, ``tune``, ``bench``,
``rollout``, ``export`` and ``serve``; each ``add_<name>_command`` (its options and help,
assembled by ``hierl.cli.parser.build_parser``) sits just above its ``cmd_<name>``."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hierl.cli.common import (
    PROG,
    CLIError,
    Parser,
    add_allow_import,
    algorithm,
    algorithm_names,
    error_line,
    is_number,
    non_negative_int,
    one_line,
    positive_int,
    resolve_checkpoint,
    trainer_class,
    user_error,
)
from hierl.cli.play import export_alphazero, is_alphazero, refuse_rollout
from hierl.cli.train import parse_stop


def add_list_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hierl list`` (its options, help and handler) to the subcommands ``sub``."""
    lst = sub.add_parser(
        "list",
        help="list algorithms",
        description="List the registered algorithms with their default policy optimizer "
        "and a one-line description.",
    )
    lst.add_argument("--names", action="store_true", help="only the names, one per line")
    lst.set_defaults(func=cmd_list)
    return lst


def cmd_list(args: argparse.Namespace) -> int:
    from hierl.algorithms.registry import describe

    names = algorithm_names()
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
    config_class = trainer_class(name).config_class
    return getattr(config_class, "default_optimizer", None) or "-"


def add_config_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hierl config`` (its options, help and handler) to the subcommands ``sub``."""
    cfg = sub.add_parser(
        "config",
        help="show an algorithm's config keys",
        description="Show the config keys of an algorithm with their defaults and meaning "
        "(for 'hierl train --config').",
    )
    cfg.add_argument("algo", type=algorithm, metavar="ALGO", help="algorithm name (any case)")
    cfg.add_argument(
        "--yaml",
        action="store_true",
        help="print a complete YAML config file (every key with its default, its "
        "documentation as a comment) to edit and pass to 'hierl train --config FILE'",
    )
    cfg.set_defaults(func=cmd_config)
    return cfg


def cmd_config(args: argparse.Namespace) -> int:
    from hierl.config import field_docs

    cls = trainer_class(args.algo)
    config_class = cls.config_class
    config = config_class.from_dict({})
    if args.yaml:
        print(_config_yaml(args.algo, config), end="")
        return 0
    print(f"{args.algo} config keys ({config_class.__name__}), set with --config '{{...}}':")
    _print_fields(config.to_dict(), field_docs(config_class), "  ")
    opt_config = getattr(config, "optimizer_config", None)
    if opt_config is not None:
        print(
            f"  optimizer_config of '{config.optimizer}' ({type(opt_config).__name__}; supported "
            f"optimizers: {', '.join(config_class.optimizer_choices())}), also as flat keys:"
        )
        _print_fields(opt_config.to_dict(), field_docs(type(opt_config)), "    ")
    return 0


def _config_yaml(algo: str, config: Any) -> str:
    from hierl.cli.config_yaml import config_yaml

    title = (
        f"{algo} config ({type(config).__name__}): every key with its default. Edit and run "
        f"'hierl train --algo {algo} --config THIS.yaml' (--env and --set override keys)."
    )
    notes = {}
    opt_config = getattr(config, "optimizer_config", None)
    if opt_config is not None:
        notes["optimizer_config"] = (
            f"These are the settings of optimizer '{config.optimizer}' "
            f"({type(opt_config).__name__}); with another 'optimizer' (supported: "
            f"{', '.join(type(config).optimizer_choices())}), delete them or give that "
            "optimizer's."
        )
    return config_yaml(config, title, notes)


def _print_fields(values: dict[str, Any], docs: dict[str, str], indent: str) -> None:
    for key, value in values.items():
        if key == "optimizer_config":
            continue  # listed with its own docs below
        print(f"{indent}{key} = {json.dumps(value, default=str)}")
        if docs.get(key):
            print(f"{indent}    {one_line(docs[key])}")


RESUME_FILE = "<the experiments of FILE>"
"""``args.resume`` of ``hierl tune FILE --resume`` (no DIR)."""


def add_tune_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hierl tune`` (its options, help and handler) to the subcommands ``sub``."""
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
    tune.add_argument(
        "file", nargs="?", metavar="FILE", help="experiment file (.yaml); not with --resume"
    )
    tune.add_argument(
        "--resume",
        nargs="?",
        const=RESUME_FILE,
        metavar="DIR",
        help="continue the interrupted Tune experiment in DIR (STORAGE_PATH/NAME, as "
        "'hierl tune' printed it): unfinished trials resume from their last checkpoints, "
        "errored ones too (Tune's Tuner.restore; DIR must be trusted: Tune unpickles its "
        "experiment state). Without DIR, after FILE: every experiment of FILE that has "
        "Tune state under --storage-path resumes, the others start",
    )
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
    tune.add_argument(
        "--seed",
        type=non_negative_int,
        metavar="N",
        help="replace every experiment's seed (its trials' base seed and its search-space "
        "sampler's): a repeat of the file from other starting configs",
    )
    tune.add_argument("--ray-address", metavar="ADDR", help="join this Ray cluster")
    tune.add_argument(
        "--verbose", type=int, default=1, choices=[0, 1, 2], help="Tune's progress output"
    )
    tune.set_defaults(func=cmd_tune)
    return tune


def cmd_tune(args: argparse.Namespace) -> int:
    """Run the experiments of a YAML file with Ray Tune; print the best trials."""

    from hierl.config import ConfigError
    from hierl.evaluators.ray_runtime import ensure_ray
    from hierl.tune.experiments import (
        load_experiments,
        resume_experiment,
        resume_or_run_experiment,
        run_experiment,
    )

    if args.resume == RESUME_FILE:  # hierl tune FILE --resume
        if args.file is None:
            raise CLIError("--resume without DIR resumes the experiments of FILE: give FILE")
        for flag, value in {"--stop": args.stop, "--seed": args.seed}.items():
            if value is not None:
                raise CLIError(
                    f"--resume continues the experiments as they were started; {flag} does "
                    "not go with it"
                )
    elif args.resume is not None:
        for flag, value in {
            "FILE": args.file,
            "--experiment": args.experiment,
            "--stop": args.stop,
            "--seed": args.seed,
            "--storage-path": args.storage_path,
        }.items():
            if value is not None:
                raise CLIError(
                    f"--resume continues the experiment in its directory as it was "
                    f"started; {flag} does not go with it"
                )
        ensure_ray(args.ray_address)
        try:
            name, spec, results = resume_experiment(args.resume)
        except ConfigError as e:
            raise CLIError(str(e)) from None
        return _print_best_trials([(name, spec, results)])
    if args.file is None:
        raise CLIError("the following arguments are required: FILE (or --resume DIR)")
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
    for spec in experiments.values():
        if args.stop:
            spec.stop = dict(args.stop)
        if args.seed is not None:
            spec.seed = args.seed
    ensure_ray(args.ray_address)
    done = []
    with _trial_user_errors_without_traceback():
        for name, spec in experiments.items():
            run = resume_or_run_experiment if args.resume == RESUME_FILE else run_experiment
            try:
                results = run(name, spec, args.storage_path, verbose=args.verbose)
            except ConfigError as e:  # e.g. a trial that can never be placed on this cluster
                raise CLIError(str(e)) from None
            done.append((name, spec, results))
    return _print_best_trials(done)


@contextlib.contextmanager
def _trial_user_errors_without_traceback() -> Iterator[None]:
    """Tune logs each failed trial's traceback: not for a user error (a corrupt input
    file, a bad setting), which ``_print_best_trials`` reports in one line (as it
    counts the failed trials, for which Tune logs a summary)."""
    import logging

    def keep(record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return error is None or user_error(error) is None

    def not_summary(record: logging.LogRecord) -> bool:  # hierl prints its own
        return not str(record.msg).startswith("Trials did not complete")

    filters = [("ray.tune.execution.tune_controller", keep), ("ray.tune.tune", not_summary)]
    for name, check in filters:
        logging.getLogger(name).addFilter(check)
    try:
        yield
    finally:
        for name, check in filters:
            logging.getLogger(name).removeFilter(check)


def _print_best_trials(experiments: list[tuple[str, Any, Any]]) -> int:
    """The table of the best trials of each ``(name, spec, ResultGrid)``; the exit status
    (1 if any trial failed)."""
    from rich.console import Console
    from rich.table import Table

    from hierl.tune.experiments import summary_rows

    table = Table(title="best trials")
    for column in ("experiment", "trial", "status", "metric", "iterations", "timesteps", "config"):
        table.add_column(column)
    failed, user_errors = 0, []
    for name, spec, results in experiments:
        for result in results:
            if result.error is None:
                continue
            failed += 1
            cause = user_error(result.error)
            if cause is not None:
                trial = Path(str(result.path)).name if result.path else "?"
                user_errors.append(f"experiment '{name}', trial {trial}: {error_line(cause)}")
        for row in summary_rows(name, spec, results):
            value = row[spec.metric]
            table.add_row(
                row["experiment"],
                str(row["trial"]),
                row["status"],
                f"{spec.metric} = {value:.4g}" if is_number(value) else f"{spec.metric} = -",
                str(row["iterations"]),
                str(row["timesteps"]),
                ", ".join(f"{k}={v}" for k, v in row["config"].items()),
            )
    console = Console()
    if not console.is_terminal:  # a log file: no need to squeeze the table into 80 columns
        console = Console(width=160)
    console.print(table)
    for line in user_errors:
        print(f"{PROG}: error: {line}", file=sys.stderr)
    if failed > len(user_errors):
        print(
            f"{PROG}: {failed - len(user_errors)} trial(s) failed; see Tune's error files above",
            file=sys.stderr,
        )
        return 1
    return 2 if failed else 0


def add_bench_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hierl bench`` (its options, help and handler) to the subcommands ``sub``."""
    from hierl.bench.options import add_arguments as add_bench_arguments

    bench = sub.add_parser(
        "bench",
        help="microbenchmarks (pick a policy optimizer for your hardware)",
        description="Run a microbenchmark: 'optimizers' drives every policy optimizer with "
        "the same trainer and reports samples/s, updates/s and driver traffic, then the "
        "SGD throughput of Table 3 and the async optimizer's driver overhead.",
    )
    bench.add_argument("target", choices=["optimizers"], help="what to benchmark")
    add_bench_arguments(bench)
    bench.set_defaults(func=cmd_bench)
    return bench


def cmd_bench(args: argparse.Namespace) -> int:
    """``hierl bench optimizers ...``: the optimizer microbenchmarks."""
    from hierl.bench.optimizers import run

    return run(args, Parser(prog=f"{PROG} bench optimizers"))


def add_rollout_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hierl rollout`` (its options, help and handler) to the subcommands ``sub``."""
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
        type=positive_int,
        metavar="N",
        help="episodes to run (default 10 unless --steps is given)",
    )
    rollout.add_argument(
        "--steps",
        type=positive_int,
        metavar="N",
        help="stop after N env steps in all, cutting the last episode short (with "
        "--episodes: whichever limit comes first; single-agent envs)",
    )
    rollout.add_argument(
        "--render", action="store_true", help="show the env on screen (render_mode='human')"
    )
    rollout.add_argument(
        "--video-dir",
        metavar="DIR",
        help="record every episode as an mp4 file in DIR (gymnasium RecordVideo; needs "
        "pip install 'hierl[render]')",
    )
    rollout.add_argument(
        "--env",
        metavar="ENV",
        help="play this env instead of the checkpoint's (same observation and action "
        "spaces); the checkpoint's env_config is dropped",
    )
    rollout.add_argument(
        "--env-config",
        metavar="JSON",
        help='env keyword arguments merged over the env_config, e.g. \'{"max_episode_steps": '
        "100}'",
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
    add_allow_import(rollout)
    rollout.set_defaults(func=cmd_rollout)
    return rollout


def cmd_rollout(args: argparse.Namespace) -> int:
    from hierl.algorithms.playback import RolloutOptions, log_episodes, rollout
    from hierl.algorithms.trainer_base import BaseTrainer
    from hierl.checkpoint import CheckpointError, load_checkpoint
    from hierl.config import ConfigError

    path = resolve_checkpoint(args.checkpoint)
    if is_alphazero(path):
        refuse_rollout(path)
    if args.output and (args.render or args.video_dir or args.steps):
        raise CLIError("--output logs whole episodes: it takes no --render, --video-dir or --steps")
    try:
        options = RolloutOptions(
            episodes=args.episodes or (None if args.steps else 10),
            steps=args.steps,
            explore=args.explore,
            seed=args.seed,
            render=args.render,
            video_dir=args.video_dir,
        )
        meta = load_checkpoint(path)[0]
        overrides = _rollout_env_overrides(args, meta.get("config") or {})
        if args.output:
            overrides.update(
                output=args.output, batch_mode="complete_episodes", rollout_fragment_length=1
            )
        trainer = BaseTrainer.for_acting(path, allow_imports=args.allow_import, **overrides)
    except (CheckpointError, ConfigError) as e:
        hint = ""
        if args.env is not None and isinstance(e, CheckpointError):
            hint = f" (--env {args.env} must have the spaces the policy was trained on)"
        raise CLIError(f"{e}{hint}") from None
    if args.seed is not None:
        from hierl.utils import seed_everything

        seed_everything(args.seed)
    returns: list[float] = []
    try:
        if args.output:
            for record in log_episodes(trainer, options.episodes or 1):
                returns.append(record.episode_reward)
                _print_episode(len(returns), record.episode_reward, record.episode_length)
        else:
            for played in rollout(trainer, options):
                record = played.record
                returns.append(record.episode_reward)
                note = " (cut short by --steps)" if played.cut else ""
                _print_episode(len(returns), record.episode_reward, record.episode_length, note)
    except ConfigError as e:
        raise CLIError(str(e)) from None
    finally:
        trainer.stop()  # also finishes the output files
    mean = sum(returns) / len(returns)
    print(f"mean return: {mean:.2f} over {len(returns)} episodes", flush=True)
    if args.output:
        print(f"logged data: {Path(args.output).resolve()}", flush=True)
    if args.video_dir:
        print(f"videos: {Path(args.video_dir).resolve()}", flush=True)
    return 0


def _rollout_env_overrides(args: argparse.Namespace, saved: Mapping[str, Any]) -> dict[str, Any]:
    """``env`` / ``env_config`` for the rollout trainer: ``--env`` replaces the env (and
    drops the saved env_config), ``--env-config`` is merged over the env_config."""
    overrides: dict[str, Any] = {}
    env_config = dict(saved.get("env_config") or {})
    if args.env is not None:
        overrides["env"], env_config = args.env, {}
    if args.env_config is not None:
        try:
            extra = json.loads(args.env_config)
        except json.JSONDecodeError as e:
            raise CLIError(f"--env-config: invalid JSON: {e}") from None
        if not isinstance(extra, dict):
            raise CLIError(
                f"--env-config must be a JSON object of env keyword arguments, got {extra!r}"
            )
        env_config.update(extra)
    if args.env is not None or args.env_config is not None:
        overrides["env_config"] = env_config
    return overrides


def _print_episode(number: int, total: float, length: int, note: str = "") -> None:
    print(f"episode {number}: return {total:.2f}, length {length}{note}", flush=True)


def add_export_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hierl export`` (its options, help and handler) to the subcommands ``sub``."""
    export = sub.add_parser(
        "export",
        help="export a checkpoint's policy as TorchScript or ONNX for serving without hierl",
        description=(
            "Write the greedy policy of a checkpoint as a self-contained model (observation "
            "preprocessing, filter and action selection folded in) plus policy.json, which "
            "says how to call it. CHECKPOINT may also be a run's output dir or its "
            "checkpoints/ dir (the latest checkpoint is used). Loading it needs only torch "
            "(TorchScript) or onnxruntime (ONNX); see hierl.export."
        ),
    )
    export.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint directory")
    export.add_argument(
        "--format",
        default="torchscript",
        metavar="FORMAT",
        help="torchscript (policy.pt) or onnx (policy.onnx, needs pip install "
        "'hierl[export]'); default torchscript",
    )
    export.add_argument(
        "--output",
        metavar="DIR",
        help="directory to write (default: CHECKPOINT_FORMAT beside the checkpoint)",
    )
    export.add_argument(
        "--policy-id",
        metavar="ID",
        help="the policy to export (multi-agent checkpoints; default: the default policy)",
    )
    add_allow_import(export)
    export.set_defaults(func=cmd_export)
    return export


def cmd_export(args: argparse.Namespace) -> int:
    from hierl.algorithms.trainer_base import BaseTrainer
    from hierl.checkpoint import CheckpointError
    from hierl.config import ConfigError
    from hierl.export import FORMATS
    from hierl.sample_batch import DEFAULT_POLICY_ID

    if args.format not in FORMATS:
        raise CLIError(f"unknown --format {args.format!r}; valid: {', '.join(FORMATS)}")
    path = resolve_checkpoint(args.checkpoint)
    output = Path(args.output) if args.output else path.with_name(f"{path.name}_{args.format}")
    if is_alphazero(path):
        return export_alphazero(args, path, output)
    try:
        trainer = BaseTrainer.for_acting(path, allow_imports=args.allow_import)
    except (CheckpointError, ConfigError) as e:
        raise CLIError(str(e)) from None
    try:
        exported = trainer.export_policy(output, args.format, args.policy_id or DEFAULT_POLICY_ID)
    except ValueError as e:  # ExportError, an unknown policy id
        raise CLIError(str(e)) from None
    finally:
        trainer.stop()
    for written in exported.paths:
        print(written.resolve(), flush=True)
    return 0


def add_serve_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hierl serve`` (its options, help and handler) to the subcommands ``sub``."""
    srv = sub.add_parser(
        "serve",
        help="serve a checkpoint's policy over HTTP (Ray Serve)",
        description=(
            "Deploy the policy of a checkpoint as a Ray Serve application and block until "
            "Ctrl-C: POST /act (observations -> actions, dynamically batched), GET /spec "
            "(spaces, algorithm, iteration, weights hash), GET /healthz. A trainer with "
            "serve_deployment={'app': NAME} pushes new weights to it. CHECKPOINT may also be "
            "a run's output dir or its checkpoints/ dir (the latest checkpoint is used)."
        ),
    )
    srv.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint directory")
    srv.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0: every interface)",
    )
    srv.add_argument("--port", type=positive_int, default=8000, help="HTTP port (default 8000)")
    srv.add_argument("--name", default="hierl", help="Serve application name (default hierl)")
    srv.add_argument(
        "--route-prefix", default="/", metavar="PREFIX", help="URL prefix of the app (default /)"
    )
    srv.add_argument(
        "--replicas", type=positive_int, default=1, metavar="N", help="replicas (default 1)"
    )
    srv.add_argument(
        "--num-cpus", type=float, default=1.0, metavar="C", help="CPUs per replica (default 1)"
    )
    srv.add_argument(
        "--max-batch-size",
        type=positive_int,
        default=32,
        metavar="N",
        help="requests batched into one forward pass (default 32; 1: no batching)",
    )
    srv.add_argument(
        "--batch-wait-ms",
        type=float,
        default=5.0,
        metavar="MS",
        help="how long a batch waits for more requests (default 5)",
    )
    srv.add_argument(
        "--auth-token",
        metavar="TOKEN",
        help="shared token: requests without 'Authorization: Bearer TOKEN' get 401 "
        "(default: $HIERL_SERVE_TOKEN; prefer it, a flag shows in the process list)",
    )
    srv.add_argument(
        "--body-timeout-s",
        type=float,
        metavar="S",
        help="a request body must arrive whole within S seconds, else 408 (default 10)",
    )
    srv.add_argument(
        "--request-timeout-s",
        type=float,
        metavar="S",
        help="a request not answered within S seconds gets 503 (default 30)",
    )
    srv.add_argument(
        "--max-body-reads-per-client",
        type=positive_int,
        metavar="N",
        help="requests whose bodies are still arriving that one client address may have "
        "at a replica (more: 429; default a third of the replica's 100 request slots)",
    )
    srv.add_argument(
        "--max-request-bytes",
        type=positive_int,
        metavar="N",
        help="larger request bodies are refused with 413 (default 16 MiB)",
    )
    srv.add_argument(
        "--max-simulations",
        type=positive_int,
        metavar="N",
        help="ALPHAZERO checkpoints (the replica runs the search): the most MCTS simulations "
        "a request's 'simulations' may ask for (default 1000)",
    )
    srv.add_argument("--ray-address", metavar="ADDR", help="join this Ray cluster")
    add_allow_import(srv)
    srv.set_defaults(func=cmd_serve)
    return srv


def cmd_serve(args: argparse.Namespace) -> int:
    from hierl.checkpoint import CheckpointError
    from hierl.config import ConfigError
    from hierl.serve import ServeError, ServeOptions, deploy, serve_until_interrupted

    path = resolve_checkpoint(args.checkpoint)
    # The limits' defaults live in ServeOptions alone: a flag left out keeps them.
    limits = {
        name: getattr(args, name)
        for name in (
            "body_timeout_s",
            "request_timeout_s",
            "max_body_reads_per_client",
            "max_request_bytes",
            "max_simulations",
        )
        if getattr(args, name) is not None
    }
    try:
        options = ServeOptions(
            name=args.name,
            host=args.host,
            port=args.port,
            route_prefix=args.route_prefix,
            num_replicas=args.replicas,
            num_cpus_per_replica=args.num_cpus,
            max_batch_size=args.max_batch_size,
            batch_wait_timeout_s=args.batch_wait_ms / 1000.0,
            auth_token=args.auth_token,
            ray_address=args.ray_address,
            allow_imports=tuple(args.allow_import),
            **limits,
        )
        app = deploy(path, options)
    except (CheckpointError, ConfigError, ServeError) as e:
        raise CLIError(str(e)) from None
    spec = app.spec
    print(
        f"serving {spec['algorithm']} iteration {spec['iteration']} (weights "
        f"{spec['hash'][:12]}) from {path}",
        flush=True,
    )
    print(f"POST {app.url}/act, GET {app.url}/spec, GET {app.url}/healthz", flush=True)
    print("Ctrl-C stops", flush=True)
    serve_until_interrupted(app)
    return 0

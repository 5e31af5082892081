"""The top of ``hierl/`` shows the design (DESIGN.md section 3): the modules it lists plus
genuinely shared ones; CLI-only code under ``hierl/cli/``, the optimizer bench and its
report under ``hierl/bench/``, one module per name for the two rollout jobs."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hierl"

TOP_LEVEL_MODULES = {
    # DESIGN.md section 3
    "__init__",
    "sample_batch",
    "policy_graph",
    "torch_policy_graph",
    "postprocessing",
    "config",
    "checkpoint",
    # shared by several packages (each has users outside the CLI)
    "_lazy",  # the lazy public names of every package __init__
    "auth",  # serve/ and evaluators/external/
    "devices",  # torch_policy_graph, postprocessing, algorithms/impala
    "export",  # cli/, algorithms/trainer, evaluators/external/
    "files",  # loggers, export, tune/, cli/
    "loggers",  # algorithms/trainer_base, cli/
    "shared_registry",  # models/, evaluators/
    "utils",  # models/, evaluators/, optimizers/, algorithms/, cli/
    "yaml_loader",  # tune/, cli/
}

TOP_LEVEL_PACKAGES = {
    "algorithms",
    "bench",
    "cli",
    "evaluators",
    "models",
    "optimizers",
    "serve",
    "tune",
}


def test_top_level_holds_only_the_designed_and_shared_modules():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert modules == TOP_LEVEL_MODULES, (
        f"unexpected: {sorted(modules - TOP_LEVEL_MODULES)}, "
        f"missing: {sorted(TOP_LEVEL_MODULES - modules)}"
    )
    assert packages == TOP_LEVEL_PACKAGES


def test_cli_only_modules_and_the_bench_live_in_their_packages():
    for name in ("progress", "config_yaml"):
        assert (PACKAGE / "cli" / f"{name}.py").is_file()
    for name in ("optimizers", "options", "report"):
        assert (PACKAGE / "bench" / f"{name}.py").is_file()


def test_no_two_modules_named_rollout():
    """Playing a checkpoint and sampling are two jobs with two names."""
    assert not list(PACKAGE.rglob("rollout.py"))
    assert (PACKAGE / "algorithms" / "playback.py").is_file()
    assert (PACKAGE / "evaluators" / "rollout_core.py").is_file()


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_only_the_cli_imports_the_cli_and_only_cli_imports_bench():
    """cli/ sits at the top of the arrows: nothing in ``hierl`` imports it; ``bench``
    is imported by the CLI alone (and ``benchmarks/``)."""
    for path in PACKAGE.rglob("*.py"):
        package = path.relative_to(PACKAGE).parts[0]
        imported = _imported_modules(path)
        if package != "cli":
            assert not any(m == "hierl.cli" or m.startswith("hierl.cli.") for m in imported), path
        if package not in ("cli", "bench"):
            assert not any(m == "hierl.bench" or m.startswith("hierl.bench.") for m in imported), (
                path
            )


def test_bench_records_find_the_repository():
    """The report runs git in the repository root, wherever the module sits."""
    from hierl.bench import report

    assert (report.REPO_ROOT / "pyproject.toml").is_file()
    assert (report.REPO_ROOT / "hierl" / "bench" / "report.py").is_file()


def test_the_parser_is_assembled_from_one_function_per_subcommand():
    """Each ``add_<name>_command`` adds exactly the subcommand ``name`` and sits in the
    module of that subcommand's handler; ``build_parser`` only assembles them."""
    import argparse
    import inspect

    from hierl.cli.common import Parser
    from hierl.cli.parser import SUBCOMMANDS, build_parser

    names = []
    for add_command in SUBCOMMANDS:
        sub = Parser(prog="hierl").add_subparsers(dest="command")
        command = add_command(sub)
        assert list(sub.choices) == [
            add_command.__name__.removeprefix("add_").removesuffix("_command")
        ]
        names.extend(sub.choices)
        handler = command.get_default("func")
        assert handler.__name__ == f"cmd_{names[-1]}"
        assert inspect.getmodule(handler) is inspect.getmodule(add_command)
    (subparsers,) = [
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ]
    assert list(subparsers.choices) == names
    assert names == [
        *("train", "rollout", "play", "export", "list", "config", "serve", "tune", "bench")
    ]

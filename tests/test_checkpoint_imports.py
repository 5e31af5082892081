"""Loading a checkpoint imports no module its config names unless the user allows it:
``model.custom_model``, ``env: "module:Id"`` and ``callbacks``, in Python and from the CLI
(``hierl.algorithms.checkpoint_imports``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hierl.algorithms.checkpoint_imports import ImportRefusedError, code_references
from hierl.algorithms.pg import PGTrainer
from hierl.algorithms.trainer_base import BaseTrainer
from hierl.evaluators import register_env
from hierl.models import register_model
from hierl.serve.policy import ServedPolicy
from tests.support.helpers import run_cli

MARKER_CODE = (
    "import os, pathlib\npathlib.Path(os.environ['HIERL_TEST_MARKER']).write_text('{name} ran')\n"
)


@pytest.fixture(scope="module")
def clean_checkpoint(tmp_path_factory):
    """A PG CartPole-v1 checkpoint (untrained) with a tiny model."""
    path = tmp_path_factory.mktemp("imports") / "ckpt"
    config = {"env": "CartPole-v1", "train_batch_size": 50, "model": {"hiddens": [8]}}
    with PGTrainer(config) as trainer:
        return trainer.save(path)


def hostile(clean: Path, tmp_path: Path, edit) -> Path:
    """A copy of ``clean`` whose stored config ``edit`` changed."""
    import shutil

    path = tmp_path / "hostile"
    shutil.copytree(clean, path)
    doc = json.loads((path / "checkpoint.json").read_text())
    edit(doc["config"])
    (path / "checkpoint.json").write_text(json.dumps(doc))
    return path


def evil_module(directory: Path, name: str, body: str = "") -> None:
    """A module that leaves a marker file when imported."""
    (directory / f"{name}.py").write_text(MARKER_CODE.format(name=name) + body)


CALLBACKS_BODY = (
    "from hierl.evaluators import EpisodeCallbacks\nclass Evil(EpisodeCallbacks):\n    pass\n"
)
MODEL_BODY = "def factory(*args, **kwargs):\n    raise SystemExit('factory ran')\n"

ROUTES = {
    # route: (edit of the stored config, the setting named, the module named)
    "custom_model": (
        lambda c: c["model"].update(custom_model="hierl_evil_model:factory"),
        "model.custom_model",
        "hierl_evil_model",
    ),
    "env": (lambda c: c.update(env="hierl_evil_env:CartPole-v1"), "env", "hierl_evil_env"),
    "callbacks": (lambda c: c.update(callbacks="callbacks:Evil"), "callbacks", "callbacks"),
}


@pytest.fixture
def evil_dir(tmp_path, monkeypatch):
    """A directory on sys.path with the three hostile modules; the marker path is set."""
    directory = tmp_path / "evil"
    directory.mkdir()
    evil_module(directory, "hierl_evil_model", MODEL_BODY)
    evil_module(directory, "hierl_evil_env")
    evil_module(directory, "callbacks", CALLBACKS_BODY)
    monkeypatch.setenv("HIERL_TEST_MARKER", str(tmp_path / "marker"))
    monkeypatch.syspath_prepend(str(directory))
    yield directory
    for name in ("hierl_evil_model", "hierl_evil_env", "callbacks"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_python_loading_refuses_a_module_named_by_the_checkpoint(
    route, clean_checkpoint, evil_dir, tmp_path
):
    edit, setting, module = ROUTES[route]
    path = hostile(clean_checkpoint, tmp_path, edit)
    with pytest.raises(ImportRefusedError) as e:
        BaseTrainer.from_checkpoint(path)
    message = str(e.value)
    assert "\n" not in message
    assert f"config field '{setting}'" in message and f"--allow-import {module}" in message
    assert f"allow_imports=['{module}']" in message
    assert not (tmp_path / "marker").exists() and module not in sys.modules
    with pytest.raises(ImportRefusedError):  # serving loads the same way
        ServedPolicy.from_checkpoint(path)
    assert not (tmp_path / "marker").exists()


def test_builtins_print_as_custom_model_is_refused(clean_checkpoint, tmp_path):
    path = hostile(
        clean_checkpoint, tmp_path, lambda c: c["model"].update(custom_model="builtins:print")
    )
    with pytest.raises(ImportRefusedError, match=r"'model\.custom_model' = 'builtins:print'"):
        BaseTrainer.from_checkpoint(path)


def test_an_allowed_module_is_imported(clean_checkpoint, evil_dir, tmp_path):
    path = hostile(clean_checkpoint, tmp_path, ROUTES["env"][0])
    trainer = BaseTrainer.from_checkpoint(path, allow_imports=["hierl_evil_env"])
    trainer.stop()
    assert (tmp_path / "marker").read_text() == "hierl_evil_env ran"
    assert trainer.config.env == "hierl_evil_env:CartPole-v1"


def test_callbacks_allowed_by_package_or_replaced_by_an_argument(
    clean_checkpoint, evil_dir, tmp_path
):
    path = hostile(clean_checkpoint, tmp_path, ROUTES["callbacks"][0])
    BaseTrainer.from_checkpoint(path, callbacks=None).stop()  # replaced: not imported
    assert not (tmp_path / "marker").exists()
    trainer = BaseTrainer.from_checkpoint(path, allow_imports=["callbacks"])
    trainer.stop()
    assert type(trainer.callbacks).__name__ == "Evil"


def test_names_registered_in_this_process_still_load(clean_checkpoint, tmp_path):
    import gymnasium as gym

    register_env("my_project:Cart-v0", lambda env_config: gym.make("CartPole-v1"))
    path = hostile(clean_checkpoint, tmp_path, lambda c: c.update(env="my_project:Cart-v0"))
    trainer = BaseTrainer.from_checkpoint(path)
    trainer.stop()
    assert trainer.config.env == "my_project:Cart-v0"
    register_model("my_project:tiny", lambda *args: None)
    assert list(code_references({"model": {"custom_model": "my_project:tiny"}})) == []
    # an env id whose module this process imported and Gymnasium registered: no new import
    (tmp_path / "b").mkdir()
    path = hostile(
        clean_checkpoint, tmp_path / "b", lambda c: c.update(env="gymnasium:CartPole-v1")
    )
    BaseTrainer.from_checkpoint(path).stop()


def test_nested_settings_are_found_but_user_data_is_not():
    config = {
        "env": "CartPole-v1",
        "env_config": {"env": "a:b", "callbacks": "c:d"},  # the user's env's own data
        "policies": {"p0": {"config": {"model": {"custom_model": "pkg.models:net"}}}},
        "member_config": {
            "callbacks": "pkg.cb:CB",
            "model": {"custom_model_config": {"env": "x:y"}},
        },
    }
    assert sorted(code_references(config)) == [
        ("member_config.callbacks", "pkg.cb:CB"),
        ("policies.p0.config.model.custom_model", "pkg.models:net"),
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_cli_refuses_each_route_with_one_line(
    route, clean_checkpoint, tmp_path, monkeypatch, capsys
):
    """With the named modules importable (their directory on sys.path), rollout, export and
    serve refuse, naming setting and flag, and import nothing."""
    from hierl.cli import main

    edit, setting, module = ROUTES[route]
    evil_dir = tmp_path / "evil"
    evil_dir.mkdir()
    evil_module(evil_dir, "hierl_evil_model", MODEL_BODY)
    evil_module(evil_dir, "hierl_evil_env")
    evil_module(evil_dir, "callbacks", CALLBACKS_BODY)
    path = hostile(clean_checkpoint, evil_dir, edit)
    marker = tmp_path / "marker"
    monkeypatch.syspath_prepend(str(evil_dir))
    monkeypatch.setenv("HIERL_TEST_MARKER", str(marker))
    for command in (
        ["rollout", str(path), "--episodes", "1"],
        ["export", str(path)],
        ["serve", str(path)],
    ):
        assert main(command) == 2, command
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("hierl: error: "), lines
        assert f"'{setting}'" in lines[0] and f"--allow-import {module}" in lines[0]
        assert not marker.exists()


@pytest.mark.timeout(300)
def test_python_m_does_not_import_from_the_current_directory(clean_checkpoint, tmp_path):
    """Even allowed, a ``callbacks`` module in the current directory is not found: ``python
    -m hierl.cli`` drops the directory ``python -m`` puts on sys.path."""
    evil_dir = tmp_path / "evil"
    evil_dir.mkdir()
    evil_module(evil_dir, "callbacks", CALLBACKS_BODY)
    path = hostile(clean_checkpoint, evil_dir, ROUTES["callbacks"][0])
    marker = tmp_path / "marker"
    argv = ["rollout", str(path), "--episodes", "1", "--allow-import", "callbacks"]
    proc = run_cli(argv, evil_dir, timeout=240, HIERL_TEST_MARKER=str(marker))
    assert proc.returncode == 2, proc.stderr
    assert "cannot import module 'callbacks'" in proc.stderr
    assert "Traceback" not in proc.stderr and not marker.exists()


def test_train_resume_refuses_a_module_named_by_the_checkpoint(tmp_path, capsys, evil_dir):
    from hierl.cli import main

    run = tmp_path / "run"
    argv = ["train", "--algo", "PG", "--env", "CartPole-v1", "--no-curve", "-q"]
    argv += ["--set", "train_batch_size=100", "--stop", "training_iteration=1"]
    assert main([*argv, "--output-dir", str(run)]) == 0
    (checkpoint,) = (run / "checkpoints").iterdir()
    doc = json.loads((checkpoint / "checkpoint.json").read_text())
    doc["config"]["callbacks"] = "callbacks:Evil"
    (checkpoint / "checkpoint.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--stop", "training_iteration=2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allow-import callbacks" in err
    assert not (tmp_path / "marker").exists()

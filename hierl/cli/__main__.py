"""``python -m hierl.cli``: the ``hierl`` command.

``python -m`` puts the current directory first on ``sys.path`` (the ``hierl`` console
script does not), so any ``callbacks.py`` or ``my_env.py`` where the command is run
would be importable by the names a config or checkpoint gives.  It is removed here, as
``python -P`` would, unless hierl itself is loaded from there (a source checkout run in
place).  (Ray also appends the driver's directory to its workers' ``sys.path``; they
import only what the driver's checked config names: see
``hierl.algorithms.checkpoint_imports``.)
"""

import os
import sys
from pathlib import Path

import hierl


def _drop_cwd_from_path() -> None:
    if sys.flags.safe_path or not sys.path:
        return
    cwd = Path(os.getcwd()).resolve()
    if (
        Path(sys.path[0] or ".").resolve() == cwd
        and Path(hierl.__file__).resolve().parent.parent != cwd
    ):
        del sys.path[0]


_drop_cwd_from_path()

from hierl.cli import main  # noqa: E402  (after the path is fixed)

sys.exit(main())

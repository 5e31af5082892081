"""``python -m hierl.cli``: the ``hierl`` command."""

import sys

from hierl.cli import main

sys.exit(main())

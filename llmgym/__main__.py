"""``python -m llmgym``: the same as the ``llmgym`` command."""

import sys

from llmgym.cli import main

sys.exit(main())

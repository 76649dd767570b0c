"""``python -m chunksel.cli``."""

from __future__ import annotations

import sys

from chunksel.cli import main

sys.exit(main())

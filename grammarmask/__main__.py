"""``python -m grammarmask``: the same as the ``grammarmask`` command."""

import sys

from .cli import main

sys.exit(main())

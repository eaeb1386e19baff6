"""``python -m jaxdp``: see :mod:`jaxdp.cli`."""

import sys

from jaxdp.cli import main

sys.exit(main())

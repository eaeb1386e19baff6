"""``python -m jaxdp``: see :mod:`jaxdp.experiments.cli`."""

import sys

from jaxdp.experiments.cli import main

sys.exit(main())

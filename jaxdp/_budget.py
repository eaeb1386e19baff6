"""Moved to :mod:`jaxdp.accounting.budget`."""
from jaxdp._moved import alias

alias(__name__, "jaxdp.accounting.budget", warn=False)

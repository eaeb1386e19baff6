"""Moved to :mod:`jaxdp.accounting.dependence`."""
from jaxdp._moved import alias

alias(__name__, "jaxdp.accounting.dependence", warn=False)

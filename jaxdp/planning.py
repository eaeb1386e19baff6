"""Moved to :mod:`jaxdp.accounting.planning`."""

from jaxdp._moved import alias

alias(__name__, "jaxdp.accounting.planning")

"""Moved to :mod:`jaxdp.posets.decomposition`."""

from jaxdp._moved import alias

alias(__name__, "jaxdp.posets.decomposition")

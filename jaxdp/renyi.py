"""Moved to :mod:`jaxdp.composition.renyi`."""

from jaxdp._moved import alias

alias(__name__, "jaxdp.composition.renyi")

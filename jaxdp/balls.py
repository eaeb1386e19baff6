"""Moved to :mod:`jaxdp.samplers.balls`."""

from jaxdp._moved import alias

alias(__name__, "jaxdp.samplers.balls")

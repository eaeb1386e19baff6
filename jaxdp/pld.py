"""Moved to :mod:`jaxdp.composition.pld`."""

from jaxdp._moved import alias

alias(__name__, "jaxdp.composition.pld")

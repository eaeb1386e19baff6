"""Moved to :mod:`jaxdp.prng.chacha`."""

from jaxdp._moved import alias

alias(__name__, "jaxdp.prng.chacha")

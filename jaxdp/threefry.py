"""Moved to :mod:`jaxdp.prng.threefry`."""

from jaxdp._moved import alias

alias(__name__, "jaxdp.prng.threefry")

"""Moved to :mod:`jaxdp.cli`."""

from jaxdp._moved import alias

alias(__name__, "jaxdp.cli")  # public path: warns

"""Moved to :mod:`jaxdp.composition.calibration`."""

from jaxdp._moved import alias

alias(__name__, "jaxdp.composition.calibration")

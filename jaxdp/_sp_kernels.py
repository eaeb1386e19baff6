"""Package-internal compatibility: moved to :mod:`jaxdp.samplers.sp_kernel`."""

from jaxdp._moved import alias

alias(__name__, "jaxdp.samplers.sp_kernel", warn=False)

"""Counter-based random number generators as ``jax.random`` implementations.

:mod:`jaxdp.prng.threefry` holds the unrolled Threefry-2x32 word streams the samplers
use; :mod:`jaxdp.prng.chacha` registers ChaCha20 (RFC 8439, for releases meant to be
published) and ChaCha8 (for studies) through ``jax.extend.random``.
"""

from jaxdp.prng import chacha, threefry
from jaxdp.prng.chacha import CHACHA8, CHACHA20

__all__ = ["CHACHA8", "CHACHA20", "chacha", "threefry"]

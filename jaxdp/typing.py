"""Type aliases for jaxdp's public signatures, in ``jax.typing``'s conventions.

Example::

  from jaxdp.typing import ArrayLike, KeyArray, Shape

  def noise(key: KeyArray, shape: Shape = ()) -> jax.Array: ...
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
from jax.typing import ArrayLike, DTypeLike

__all__ = ["ArrayLike", "DTypeLike", "KeyArray", "Scalar", "Shape"]

KeyArray = jax.Array
"""A PRNG key: a typed key array (``jax.random.key``, :func:`jaxdp.random.secure_key`)
or a legacy ``uint32`` key (``jax.random.PRNGKey``)."""

Shape = Sequence[int]
"""A batch shape, as ``jax.random`` takes it."""

Scalar = float | int | ArrayLike
"""A scalar parameter (a Python number or a 0-d array)."""

"""Package-internal compatibility: these names live in :mod:`jaxdp.samplers`."""

from jaxdp.samplers.dispatch import (chunk_size, objects, points, sample_objects,
                                     tables_and_layout)
from jaxdp.samplers.simplex import chain_noise, uniform_points
from jaxdp.samplers.subsets import linear_extensions

"""Package-internal compatibility: these names live in :mod:`jaxdp.samplers`."""

from jaxdp.samplers.dispatch import AUTO_FOREST_MAX_D, METHODS, num_objects, resolve_method
from jaxdp.samplers.exact_tables import EXACT_MAX_OBJECTS, ExactTables, exact_tables
from jaxdp.samplers.forest import (FOREST_MAX_D, ForestLayout, ForestTables, forest_layout,
                                   forest_tables)
from jaxdp.samplers.general import GENERAL_MAX_D, GeneralTables, general_tables
from jaxdp.samplers.logweights import cdf as _cdf
from jaxdp.samplers.subsets import extension_counts as _extension_counts

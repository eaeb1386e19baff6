"""The paper's experiments, beside the library: utility studies, the published
insertion sampler (a named baseline, not uniform) and the command line.

Importing :mod:`jaxdp` does not import this package; import
``jaxdp.experiments.studies`` / ``baselines`` / ``cli`` explicitly.
"""

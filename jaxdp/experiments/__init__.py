"""The paper's experiments, beside the library: utility studies, the published
insertion sampler (a named baseline, not uniform) and synthetic questionnaires; the
command line that runs them is :mod:`jaxdp.cli`.

Importing :mod:`jaxdp` does not import this package; import
``jaxdp.experiments.studies`` / ``baselines`` explicitly.
"""

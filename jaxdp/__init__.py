"""jaxdp: exact, fast, batched differential-privacy noise for JAX."""

from jaxdp import random
from jaxdp.balls import LpBall, PosetBall, enumerate_objects, exact_second_moment
from jaxdp.posets import Poset, random_dag, random_dags

__version__ = "0.1.0"

__all__ = [
    "LpBall",
    "Poset",
    "PosetBall",
    "enumerate_objects",
    "exact_second_moment",
    "random",
    "random_dag",
    "random_dags",
]

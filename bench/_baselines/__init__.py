"""Baseline placement policies for the placement benchmark, implemented from their descriptions.

They live in bench/, not mig/: they exist only to be measured against. All share HAMi's per-GPU
profile choice (memory ascending, then fewer slices; the first profile with a free placement wins,
so a bigger profile is used when the smallest has no room on that GPU).
"""

from _baselines.best_fit import BestFit
from _baselines.common import Baseline, BGpu, BNode, Pick, catalog_node
from _baselines.first_fit import FirstFit
from _baselines.hami2378 import Hami2378, Hami2378Binpack
from _baselines.hami2855 import Hami2855, Hami2855Binpack

__all__ = [
    "BGpu",
    "BNode",
    "Baseline",
    "BestFit",
    "FirstFit",
    "Hami2378",
    "Hami2378Binpack",
    "Hami2855",
    "Hami2855Binpack",
    "Pick",
    "catalog_node",
]

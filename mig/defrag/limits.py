"""How much work one defrag advice may do: the bounds of each search. Whatever a bound leaves
unexplored makes the advice "not proven cheapest". See docs/defrag.md, "Bounds".
"""

MAX_CHECKS = 400  # engine calls per advice for multi-device pods; ~1 ms each on an 8-GPU node
MAX_MOVES = 100  # sets per advice whose removed pods are placed on the whole fleet to count the lost

MAX_CHAIN_TRIALS = 24  # grown sets tried on the whole fleet per advice, per phase (uniform-cost, beam)
MAX_CHAIN_DEPTH = 3  # steps of a chain: a stranded pod given a home by moving the pods in its way
CHAIN_BRANCH = 24  # sets kept per step, cheapest first (the rest are a cut: not proven cheapest)
MAX_CHAIN_STEPS = 12  # sets grown per advice by the uniform-cost search (each reads a pod's rooms)
CHAIN_WINDOW = 16 * CHAIN_BRANCH  # rooms of a stranded pod read per step, cheapest first
BEAM_SEEDS, BEAM_WIDTH = 6, 3  # past the budget: stranding sets grown per step, and sets each grows

MAX_RELAY_TRIALS = 96  # whole-fleet trials of re-laid GPUs per advice
MAX_RELAY_SHRINK = 16  # more trials to make a working re-laid set smaller
RELAY_SETTLE = 3  # trials per region: pods in no one's way, or placed nowhere, keep their place
RELAY_SINGLES = 8  # single GPUs re-laid, most wasteful first
RELAY_LEADS = 16  # GPUs that lead a pair (the most wasteful)
RELAY_PARTNERS = 256  # GPUs each lead is paired with (the most wasteful, a lead's own waste aside)

"""`dynmig status` (also `kubectl dynmig status`): the fleet's MIG slices, what still fits, and why
MIG pods wait. `cluster` turns nodes and pods into the slice map (`mig.slicemap`)."""

"""kube-scheduler's structured DRA allocation, simulated from the ResourceSlice objects alone.

`allocator`: pools, slices, device order, CEL selectors, counters, the first-fit search (checked
against upstream's allocator source; see its docstring). `scheduler`: one scheduling cycle over
nodes, and the informer's store of slices (the bench's). `podclaims`: which claim a pod's entry
means (the resourceclaim library). `claims`: kube-controller-manager's ResourceClaim controller.
The simulated kube-scheduler's DynamicResources plugin is `sim.scheduler.dra`. Takes no facts from
dynmig (imports nothing of mig).
"""

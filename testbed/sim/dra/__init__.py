"""kube-scheduler's structured DRA allocation, simulated from the ResourceSlice objects alone.

`allocator`: pools, slices, device order, CEL selectors, counters, the first-fit search (checked
against upstream's allocator source; see its docstring). `scheduler`: one scheduling cycle over
nodes, and the informer's store of slices. Takes no facts from dynmig (imports nothing of mig).
"""

"""`dynmig dra-plugin`: dynmig's DRA kubelet plugin (docs/dra.md).

On a node pool in DRA mode kube-scheduler allocates MIG devices to ResourceClaims from the
ResourceSlices this plugin publishes (steered: each profile's placements in the order dynmig's
engine prefers them); kubelet then calls NodePrepareResources, and the plugin creates exactly the
allocated GPU instance, and NodeUnprepareResources, and it destroys exactly it. Modules:
`config` (flags), `gpus` (the node's MIG GPUs through NVML), `claims` (what an allocation names),
`journal`-backed `prepare` (create, destroy, adopt), `cdi` (the spec files the container runtime
reads), `publish` (ResourceSlices), `service` (kubelet's registration and DRA gRPC), `main`.
"""

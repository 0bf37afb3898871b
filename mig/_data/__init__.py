"""Files dynmig reads at run time (the default policy and its examples, the Helm chart), shipped in the package.

`charts` and `policies` are symlinks to the checkout's top-level folders, so the checkout keeps one copy
and the built wheel carries real files; read them only through `base.resources`.
"""

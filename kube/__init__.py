"""The Kubernetes API as every dynmig process reaches it, over the official `kubernetes` client.

One client builder (`kube.client`), one error hierarchy translated from the client's exceptions in
one place (`kube.errors`), one list-and-watch loop (`kube.reflector`) and the stop deadline of a pod
being terminated (`kube.shutdown`). It imports nothing else of dynmig, so the scheduler side
(`webhooks`), the node side (`plugin`) and `certs` can all stand on it and stay apart.
"""

"""Kubernetes device-plugin API v1beta1: our .proto and the stubs generated from it.

Use `from plugin.api import deviceplugin_pb2 as pb, deviceplugin_pb2_grpc as rpc`.
Constants from the API's constants.go are below.
"""

VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins/"
KUBELET_SOCKET_NAME = "kubelet.sock"
KUBELET_SOCKET = DEVICE_PLUGIN_PATH + KUBELET_SOCKET_NAME
PRE_START_CONTAINER_TIMEOUT_S = 30
SUPPORTED_VERSIONS = (VERSION,)

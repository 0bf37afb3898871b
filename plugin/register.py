"""Publishing this node's MIG capabilities as `hami.io/node-nvidia-register` (HAMi's format).

Written only when the encoded JSON differs from what the node already carries, so a steady node
causes no API writes and no scheduler cache churn.
"""

from __future__ import annotations

import logging

from mig.annotations import NODE_REGISTER, encode_node_register
from plugin.discovery import Inventory, registration
from plugin.kube import Kube, KubeError
from plugin.metrics import PluginMetrics

log = logging.getLogger("dynmig.plugin.register")


def register_text(inventory: Inventory) -> str:
    return encode_node_register(registration(inventory))


class Publisher:
    def __init__(self, kube: Kube, metrics: PluginMetrics):
        self.kube = kube
        self.metrics = metrics
        self.last: str | None = None

    def publish(self, inventory: Inventory) -> bool:
        """Write the annotation if it changed; True when written. API errors are logged, retried later."""
        text = register_text(inventory)
        if text == self.last:
            return False
        try:
            if self.kube.get_node().annotations.get(NODE_REGISTER) != text:
                self.kube.patch_node_annotations({NODE_REGISTER: text})
                self.metrics.registration_publishes.inc()
                log.info("published %s for %d GPU(s)", NODE_REGISTER, len(inventory.managed))
                self.last = text
                return True
        except KubeError as error:
            log.warning("could not publish %s: %s", NODE_REGISTER, error)
            return False
        self.last = text
        return False

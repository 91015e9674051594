"""The worker that executes and times a GPU target's modules on a jax device (``device.py`` chose it).

It answers the CPU worker's execution requests (``execute``, ``execute_reference``, ``time``,
``time_ab``, ``calibrate``, ``cost``, ``stand_ins``, ``host_compiles``, ``memory``) with the same code
(``runner.py``, ``timing.py``), on the client of ``platform``: ``cuda`` on a machine whose jax sees a
GPU, or ``cpu``, jax's CPU device, which stands in for it in CI and on request. What differs from the
host worker is only what a device needs, and it is the same on both platforms, so CI runs the GPU's
code path:

* ``dispatch_ahead``: timing draws its inputs on the device, dispatches a sample's runs back to back
  and waits once, and feeds donated inputs from their aliasing outputs (``timing._Timer``);
* the memory limit is the device's own where it reports one (``runner.device_limit``);
* custom calls are checked against the platform's own registry (``CUDA`` or ``Host``) for stand-ins.

It applies no passes (no capture hook, no inventory): steps stay with the target's deviceless workers.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from autotune.errors import BadInput
from autotune.pipelines.xla import runner
from autotune.pipelines.xla.worker import XlaWorker, compiler_message

#: XLA's custom-call registry name per jax platform.
REGISTRY = {"cuda": "CUDA", "cpu": "Host"}


class XlaDeviceWorker(XlaWorker):
    """Handler served by ``autotune.core.workers``: ``XlaWorker``'s execution requests on ``platform``."""

    #: ``timing._Timer`` reads it: inputs drawn on the device, runs dispatched ahead, donations fed.
    dispatch_ahead = True

    def __init__(self, platform: str = "cpu"):
        if platform not in REGISTRY:
            raise BadInput(f"unknown execution platform '{platform}' (expected {', '.join(REGISTRY)})")
        os.environ.setdefault("JAX_PLATFORMS", platform)
        from jax._src import xla_bridge
        from jax._src.lib import _jax

        self.platform = platform
        self._jax = self.jax_lib = _jax
        try:
            self.backend = xla_bridge.get_backend(platform)
        except Exception as exc:
            raise BadInput(f"jax cannot start its {platform} backend here: {compiler_message(exc)}") from None
        self.devices = _jax.DeviceList((self.backend.local_devices()[0],))
        self._capturing = False
        self._captured = None
        self.inventory = None
        self._overrides = {}
        self._mlir_cache = OrderedDict()

    def stand_ins(self, proto: bytes, extra: tuple = ()) -> tuple:
        """Stand-ins for the custom calls this device's runtime cannot run (its own registry)."""
        return runner.stand_ins(proto, tuple(extra), REGISTRY[self.platform])

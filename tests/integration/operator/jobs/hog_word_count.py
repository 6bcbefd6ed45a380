"""The word-count example, plus a memory hog for the OOM test on the node.

Once `/tmp/oom-now` appears (the test writes it into the pod's /tmp, an emptyDir, from the host),
a thread allocates memory until the kernel kills the container for exceeding its limit. It does
so once: it leaves `/tmp/oom-done` behind, and the emptyDir outlives the container's restart.
Mounted from a ConfigMap through spec.podTemplate; the image stays the one built for the product.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time

EXAMPLE = "/opt/floe/examples/word-count/word_count.py"
TRIGGER = "/tmp/oom-now"
DONE = "/tmp/oom-done"


def _word_count() -> object:
    spec = importlib.util.spec_from_file_location("word_count", EXAMPLE)
    assert spec is not None and spec.loader is not None, EXAMPLE
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.job


def _hog() -> None:
    while not os.path.exists(TRIGGER) or os.path.exists(DONE):
        time.sleep(0.5)
    with open(DONE, "w"):
        pass
    held = []
    while True:
        held.append(b"x" * (128 << 20))  # written, so every page counts against the limit


job = _word_count()
threading.Thread(target=_hog, name="oom-hog", daemon=True).start()

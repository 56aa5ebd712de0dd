"""`python -m eval.worker READ_FD WRITE_FD [SEND_REGION_FD RECV_REGION_FD]`: drop privileges, then serve."""

import os
import time

_STARTED = time.monotonic()  # before the imports below: a worker's start is mostly them (`Hello`'s `start_parts_s`)


def _drop_privileges() -> None:
    """When started as root with KH_DROP_UID set, become that user before anything else runs."""
    uid = os.environ.pop("KH_DROP_UID", None)
    if uid is None or os.getuid() != 0:
        return
    os.setgroups([])
    os.setgid(int(uid))
    os.setuid(int(uid))


_drop_privileges()

from eval.worker.serve import main  # noqa: E402  (after the privilege drop)

main(_STARTED)

"""What this machine lets a worker's sandbox do, found once for every test whose expectations depend on it."""

from __future__ import annotations

import os
import shutil
import subprocess


def _mount_namespaces_work() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    args = [unshare, "-m", "true"] if os.geteuid() == 0 else [unshare, "-U", "-r", "-m", "true"]
    return subprocess.run(args, capture_output=True).returncode == 0


MOUNT_NS = _mount_namespaces_work()  # a worker's filesystem view is then read-only outside its own folders

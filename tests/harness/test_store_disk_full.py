"""The run store on a real full filesystem (a tmpfs in a mount namespace, out of blocks or of inodes): a write that
fails leaves no folder it made for it, neither a new run's folder nor a `code/<problem>/` folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.paths import REPO

# Runs inside the namespace, with the tmpfs mounted at argv[1]; prints what is left there after each failed write.
_SCRIPT = textwrap.dedent("""
    import os, subprocess, sys
    from pathlib import Path
    from harness.store import Attempt, RunStore, StoreError

    mnt = Path(sys.argv[1])
    config = {"name": "r", "turns": 1}

    def left() -> list[str]:
        return sorted(str(p.relative_to(mnt)) for p in mnt.rglob("*") if p.name != "filler")

    filler = mnt / "filler"  # every block taken: a new run's folder can be made, its first file not written
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"x" * 65536)
                f.flush()
        except OSError:
            pass
    try:
        RunStore.open(mnt / "runs" / "new", config)
        print("opened")
    except StoreError as exc:
        print("new run refused:", exc)
    print("left:", left())
    filler.unlink()

    store = RunStore.open(mnt / "run", config)  # room to spare; then only three inodes are left
    store.begin_session()
    store.record(Attempt(problem_id="L9/first", sample=1, turn=1, status="agent_error", prompt=[]))
    st = os.statvfs(mnt)
    subprocess.run(["mount", "-o", f"remount,nr_inodes={st.f_files - st.f_ffree + 3}", str(mnt)], check=True)
    try:  # committed, then code/L9/new/ made (three inodes) and its file cannot be created
        store.record(Attempt(problem_id="L9/new", sample=1, turn=1, status="correct", prompt=[], code="x = 1\\n"))
        print("recorded")
    except StoreError as exc:
        print("code refused:", exc)
    store.close()
    print("left:", left())
""")


def _namespace() -> list[str]:
    unshare = shutil.which("unshare")
    prefix = [unshare, "-m"] if unshare and os.geteuid() == 0 else []
    if not prefix or subprocess.run([*prefix, "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                                    capture_output=True).returncode != 0:  # fmt: skip
        pytest.skip("mounting a tmpfs in a mount namespace is not permitted here (needs root and unshare)")
    return prefix


def test_a_full_disk_leaves_no_empty_folders(tmp_path: Path) -> None:
    prefix = _namespace()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    (tmp_path / "script.py").write_text(_SCRIPT)
    shell = f"mount -t tmpfs -o size=2m tmpfs '{mnt}' || exit 99\n'{sys.executable}' '{tmp_path}/script.py' '{mnt}'"
    done = subprocess.run([*prefix, "sh", "-c", shell], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"new run refused: cannot write {mnt}/runs/new/config.yaml: No space left"), lines
    assert lines[1] == "left: []", lines  # neither runs/ nor runs/new/ (nor its lock file)
    assert lines[2].startswith(f"code refused: cannot write {mnt}/run/code/L9/new/1_1.py: No space left"), lines
    assert lines[3] == "left: ['run', 'run/.lock', 'run/attempts.sqlite', 'run/config.yaml', 'run/results.jsonl']", lines

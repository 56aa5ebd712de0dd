"""Every bench records the machine it ran on, NUMA topology included (where the timing cores sit against each GPU's
node bears on the wall bound's figures)."""

from __future__ import annotations

from harness.bench.pools import environment, numa_nodes


def test_numa_nodes_are_read_from_sysfs(tmp_path):
    for name, cpus in (("node0", "0-15,32-47\n"), ("node1", "16-31,48-63\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "cpulist").write_text(cpus)
    (tmp_path / "node2").mkdir()  # a memory-only node has no CPU list
    (tmp_path / "possible").write_text("0-2\n")
    assert numa_nodes(tmp_path) == {"node0": "0-15,32-47", "node1": "16-31,48-63"}
    assert numa_nodes(tmp_path / "absent") == {}


def test_the_environment_names_this_machines_nodes():
    env = environment()
    assert env["numa_nodes"] == numa_nodes()
    assert env["cpu_cores"] >= 1 and env["torch"]

"""What every bench's rows share: the machine they ran on, NUMA topology included (where the timing cores sit against
each GPU's node bears on the wall bound's figures), and the summary of the wall bound's doubts, built from what the
results say."""

from __future__ import annotations

from harness.bench.pools import bound_summary, environment, numa_nodes


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


def test_the_summary_counts_doubts_and_spreads_the_bounds_figures():
    rows = [{"status": "correct", "reason": "", "retried_alone": i == 0, "second_look": 1.0 if i < 2 else None,
             "unexplained_us": float(i), "limit_us": 10.0, "paired_gap_median_us": float(10 * i),
             "reference_overhead_us": 1000.0 + i} for i in range(11)]
    rows.append({"status": "rejected", "reason": "work ran outside", "retried_alone": True})
    s = bound_summary(rows)
    assert (s["correct"], s["rejected"], s["retried_alone"], s["second_looks"]) == (11, ["work ran outside"], 2, 2)
    assert s["unexplained_over_limit"] == {"p10": 0.1, "p50": 0.5, "p90": 0.9, "max": 1.0}
    assert s["paired_gap_median_us"]["p50"] == 50.0 and s["reference_overhead_us"]["max"] == 1010.0
    assert bound_summary(rows[-1:])["unexplained_over_limit"] is None

"""Loaders: a local KernelBench checkout, the KernelBench dataset schema (offline), single files, selection specs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import datasets
import pytest

from problems.kernelbench import (
    LoadFailure,
    find_kernelbench_root,
    kernelbench_id,
    load_kernelbench_dataset,
    load_kernelbench_dir,
    parse_level,
)
from problems.problem import Problem, ProblemError
from problems.select import SMOKE, select_entries, select_problems
from problems.suite import SUITE_DIR, load_suite, solution_path
from tests.paths import KERNELBENCH as FIXTURE, REPO

KB_ROOT = FIXTURE / "KernelBench"

EXPECTED_IDS = [
    "KB/L1/1_Sound_matmul", "KB/L1/2_Constant_output", "KB/L1/3_Zero_output", "KB/L1/4_Random_forward",
    "KB/L1/5_Input_independent", "KB/L1/6_Too_big_for_memory", "KB/L1/7_Missing_get_inputs", "KB/L1/8_Nan_output",
    "KB/L2/1_Sound_gemm_relu", "KB/L2/2_Min_clamp_zero", "KB/L2/3_Scalar_mean_loss",
    "KB/L3/1_Sound_mlp", "KB/L3/2_Hangs",
]


def _rows(level: int, with_py_suffix: bool) -> dict[str, list]:
    files = sorted((KB_ROOT / f"level{level}").glob("*.py"), key=lambda p: int(p.stem.split("_")[0]))
    return {
        "code": [f.read_text() for f in files],
        "level": [level] * len(files),
        "name": [f.name if with_py_suffix else f.stem for f in files],
        "problem_id": [int(f.stem.split("_")[0]) for f in files],
    }


def test_checkout_is_read_in_level_and_number_order():
    entries = load_kernelbench_dir(FIXTURE)
    assert [e.id for e in entries] == EXPECTED_IDS
    sound = entries[0]
    assert isinstance(sound, Problem) and sound.level == "level1" and sound.dtype == "float32"
    assert sound.name == "1_Sound_matmul" and sound.path.endswith("level1/1_Sound_matmul.py")
    missing = entries[6]
    assert isinstance(missing, LoadFailure) and "missing get_inputs" in missing.error


def test_checkout_root_or_inner_folder_and_numeric_order(tmp_path):
    assert find_kernelbench_root(FIXTURE) == KB_ROOT
    assert find_kernelbench_root(KB_ROOT) == KB_ROOT
    with pytest.raises(ProblemError, match="no KernelBench levels"):
        find_kernelbench_root(tmp_path)
    # problem 10 sorts after problem 2 (numbers, not strings); files without a number are ignored
    level = tmp_path / "level1"
    level.mkdir()
    for name in ("2_B.py", "10_C.py", "1_A.py"):
        shutil.copy(KB_ROOT / "level1" / "1_Sound_matmul.py", level / name)
    (level / "helper.py").write_text("x = 1\n")
    assert [e.id for e in load_kernelbench_dir(tmp_path)] == ["KB/L1/1_A", "KB/L1/2_B", "KB/L1/10_C"]


def test_checkout_level_filter():
    assert [e.id for e in load_kernelbench_dir(FIXTURE, [2])] == EXPECTED_IDS[8:11]
    with pytest.raises(ProblemError, match="no level4 folder"):
        load_kernelbench_dir(FIXTURE, [4])


def test_ids_and_levels():
    assert kernelbench_id(1, 1, "1_Square_matrix_multiplication_.py") == "KB/L1/1_Square_matrix_multiplication_"
    assert kernelbench_id(2, 7, "Conv_ReLU") == "KB/L2/7_Conv_ReLU"
    assert [parse_level(t) for t in ("1", "level2", "level_3", "L1")] == [1, 2, 3, 1]
    with pytest.raises(ProblemError):
        parse_level("first")


def test_dataset_saved_to_disk_matches_the_checkout(tmp_path):
    dd = datasets.DatasetDict({f"level_{n}": datasets.Dataset.from_dict(_rows(n, with_py_suffix=n == 1)) for n in (1, 2, 3)})
    dd.save_to_disk(str(tmp_path / "kb"))
    from_dataset = load_kernelbench_dataset(str(tmp_path / "kb"))
    from_checkout = load_kernelbench_dir(FIXTURE)
    assert [e.id for e in from_dataset] == [e.id for e in from_checkout] == EXPECTED_IDS
    for a, b in zip(from_dataset, from_checkout):
        assert type(a) is type(b)
        if isinstance(a, Problem):
            assert (a.source, a.level, a.name) == (b.source, b.level, b.name)
    assert [e.id for e in load_kernelbench_dataset(str(tmp_path / "kb"), [2])] == EXPECTED_IDS[8:11]
    with pytest.raises(ProblemError, match="no split 'level_4'"):
        load_kernelbench_dataset(str(tmp_path / "kb"), [4])


def test_dataset_saved_as_one_table_is_split_by_its_level_column(tmp_path):
    rows = {key: _rows(1, True)[key] + _rows(3, True)[key] for key in ("code", "level", "name", "problem_id")}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "one"))
    assert [e.id for e in load_kernelbench_dataset(str(tmp_path / "one"))] == EXPECTED_IDS[:8] + EXPECTED_IDS[11:]


def test_dataset_as_hub_parquet_layout(tmp_path):
    data = tmp_path / "KernelBench" / "data"
    data.mkdir(parents=True)
    for n in (1, 3):
        datasets.Dataset.from_dict(_rows(n, with_py_suffix=False)).to_parquet(str(data / f"level_{n}-00000-of-00001.parquet"))
    entries = load_kernelbench_dataset(str(tmp_path / "KernelBench"))
    assert [e.id for e in entries] == EXPECTED_IDS[:8] + EXPECTED_IDS[11:]
    assert [e.id for e in select_entries(f"hf:{tmp_path / 'KernelBench'}:level_3")] == EXPECTED_IDS[11:]


def test_dataset_errors_are_clear(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProblemError, match="neither a saved dataset nor a folder"):
        load_kernelbench_dataset(str(tmp_path / "empty"))


def test_selection_specs():
    suite = load_suite()
    assert [p.id for p in select_problems("all")] == [p.id for p in suite]
    assert len(select_problems("level1")) == len(select_problems("L1")) == sum(p.level == "level1" for p in suite)
    smoke = select_problems("smoke")
    assert [p.id for p in smoke] == list(SMOKE) and 4 <= len(smoke) <= 6
    assert {p.level for p in smoke} == {"level1", "level2", "level3", "llm"}
    assert all(solution_path(p) for p in smoke)
    softmax = [p.id for p in select_problems("*softmax*")]
    assert "L1/13_softmax" in softmax and "L2/18_linear_softmax" in softmax
    assert [p.id for p in select_problems("L2/1[56]_*")] == ["L2/15_bias_residual_layernorm", "L2/16_add_rmsnorm"]
    union = select_problems("L1/13_softmax, smoke ,L1/13_softmax")
    assert [p.id for p in union] == list(dict.fromkeys(["L1/13_softmax", *SMOKE]))
    with pytest.raises(ProblemError, match="no problem matches"):
        select_problems("L9/*")
    with pytest.raises(ProblemError, match="empty problem selection"):
        select_problems(" ")


def test_selection_of_kernelbench_and_files(tmp_path):
    assert [e.id for e in select_entries(f"kernelbench:{FIXTURE}:level1")] == EXPECTED_IDS[:8]
    assert [e.id for e in select_entries(f"kernelbench:{KB_ROOT}")] == EXPECTED_IDS
    with pytest.raises(ProblemError, match="7_Missing_get_inputs"):
        select_problems(f"kernelbench:{FIXTURE}")  # strict: names every file that failed
    suite_file = SUITE_DIR / "level2" / "16_add_rmsnorm.py"
    assert select_problems(f"file:{suite_file}")[0].id == "L2/16_add_rmsnorm"  # a suite file keeps its id
    outside = tmp_path / "my_problem.py"
    shutil.copy(KB_ROOT / "level1" / "1_Sound_matmul.py", outside)
    (problem,) = select_problems(str(outside))
    assert (problem.id, problem.level) == ("my_problem", "custom")
    with pytest.raises(ProblemError, match="cannot read problem file"):
        select_problems(str(tmp_path / "absent.py"))


def test_an_unreachable_hub_is_one_clear_line_without_retries(tmp_path) -> None:
    """`hf:` with no way to the Hub (here a port nothing listens on): the one-line error at once, not ten lines of
    `datasets` retrying for about 40 s before it."""
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")}
    env.pop("HF_HUB_OFFLINE", None)
    done = subprocess.run([sys.executable, "-m", "harness.cli", "problems", "list", "hf:ScalingIntelligence/KernelBench"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert done.returncode != 0 and "cannot reach the Hugging Face Hub at http://127.0.0.1:9" in done.stderr, done.stderr
    assert "HF_HUB_OFFLINE=1" in done.stderr and "Retrying" not in done.stderr, done.stderr

"""Prompt templates, rendering of multi-turn conversations, context policies, hardware facts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agents.extract import extract_code
from agents._hardware import HARDWARE_PRESETS, hardware_facts, preset_for_device_name
from agents.prompting import EXAMPLES_DIR, PromptBuilder, PromptError, TurnRecord, available_templates, fenced

PROBLEM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2.5  # a distinctive line

def get_inputs():
    return [torch.randn(128, 256)]

def get_init_inputs():
    return []
'''


def record(turn: int, code: str | None, feedback: str, prose: str = "") -> TurnRecord:
    reply = f"Reasoning for turn {turn}. {prose}\n\n{fenced(code)}" if code is not None else f"Reasoning only, turn {turn}."
    return TurnRecord(turn=turn, reply=reply, code=code, feedback=feedback)


def test_triton_first_prompt_has_every_part() -> None:
    msgs = PromptBuilder("triton", hardware="H100-SXM").messages(PROBLEM)
    assert [m.role for m in msgs] == ["system", "user"]
    prompt = msgs[1].content
    assert PROBLEM.strip() in prompt
    assert "@triton.jit" in prompt and "ModelNew.forward" in prompt
    assert 'tl.dot(a, b, input_precision="ieee")' in prompt and "TF32 disabled" in prompt
    assert "- SMs: 132" in prompt and "- Memory bandwidth: 3.35 TB/s" in prompt and "- L2 cache: 50 MB" in prompt
    assert (EXAMPLES_DIR / "add_relu_triton.py").read_text().strip() in prompt
    assert (EXAMPLES_DIR / "add_relu_reference.py").read_text().strip() in prompt
    assert "exactly one fenced ```python code block" in prompt
    assert "$" not in prompt.replace("$$", "")  # every placeholder was filled


def test_cuda_first_prompt_uses_load_inline_and_its_own_example() -> None:
    prompt = PromptBuilder("cuda").first_prompt(PROBLEM)
    assert "torch.utils.cpp_extension.load_inline" in prompt
    assert (EXAMPLES_DIR / "add_relu_cuda.py").read_text().strip() in prompt
    assert "@triton.jit" not in prompt
    assert "Not specified." in prompt  # no hardware given: said so, nothing invented


def test_the_worked_examples_are_extractable_from_the_prompt() -> None:
    for backend in ("triton", "cuda"):
        example = (EXAMPLES_DIR / f"add_relu_{backend}.py").read_text()
        assert extract_code(fenced(example)) == example


def test_feedback_turns_full_context() -> None:
    builder = PromptBuilder("triton", context="full")
    history = [
        record(1, "class ModelNew: broken", "Status: compile_error\nSyntaxError: invalid syntax"),
        record(2, "class ModelNew: pass", "Status: incorrect\nmax abs error 0.3 at [0, 5]"),
    ]
    msgs = builder.messages(PROBLEM, history)
    assert [m.role for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[2].content == history[0].reply and msgs[4].content == history[1].reply
    assert "(turn 1)" in msgs[3].content and "SyntaxError: invalid syntax" in msgs[3].content
    assert "(turn 2)" in msgs[5].content and "max abs error 0.3" in msgs[5].content
    assert "exactly one fenced ```python code block" in msgs[5].content


def test_last_k_keeps_recent_code_and_feedback_and_drops_reasoning() -> None:
    builder = PromptBuilder("triton", context="last_k", last_k=2)
    history = [record(t, f"class ModelNew:\n    v = {t}\n", f"feedback {t}", prose=f"secret-{t}") for t in range(1, 5)]
    history.append(TurnRecord(turn=5, reply="I could not decide.", code=None, feedback="format_error: no code block"))
    msgs = builder.messages(PROBLEM, history)
    assert [m.role for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "3 earlier attempt(s) are omitted" in msgs[1].content
    assert msgs[2].content == fenced("class ModelNew:\n    v = 4\n")  # code only, no reasoning
    assert "feedback 4" in msgs[3].content and "(turn 4)" in msgs[3].content
    assert "no usable code block" in msgs[4].content
    assert "format_error: no code block" in msgs[5].content
    text = "\n".join(m.content for m in msgs)
    assert "secret-" not in text and "feedback 3" not in text and "v = 3" not in text


def test_last_k_with_short_history_keeps_everything_but_reasoning() -> None:
    builder = PromptBuilder("triton", context="last_k", last_k=3)
    history = [record(1, "class ModelNew: pass\n", "fb", prose="why")]
    msgs = builder.messages(PROBLEM, history)
    assert len(msgs) == 4 and "omitted" not in msgs[1].content
    assert msgs[2].content == fenced("class ModelNew: pass\n")


def test_full_context_with_an_empty_reply_sends_no_empty_message() -> None:
    msgs = PromptBuilder("triton").messages(PROBLEM, [TurnRecord(1, "", None, "The reply was empty.")])
    assert msgs[2].content == "(empty reply)"


def test_no_system_message() -> None:
    msgs = PromptBuilder("triton", system=None).messages(PROBLEM)
    assert [m.role for m in msgs] == ["user"]


def test_templates_by_name_from_a_directory_and_by_path(tmp_path: Path) -> None:
    (tmp_path / "terse.md").write_text("Solve:\n$problem_source\nCost: $$5\n")
    (tmp_path / "fb.md").write_text("Turn $turn said: $feedback")
    builder = PromptBuilder("triton", template="terse", feedback=str(tmp_path / "fb.md"), prompts_dir=tmp_path)
    assert builder.first_prompt(PROBLEM) == f"Solve:\n{PROBLEM.strip()}\nCost: $5\n"
    assert builder.feedback_prompt(TurnRecord(3, "r", None, "bad")) == "Turn 3 said: bad"
    assert {"terse", "triton", "cuda", "feedback", "system"} <= set(available_templates(tmp_path))


def test_unknown_template_lists_valid_names() -> None:
    with pytest.raises(PromptError, match=r"unknown prompt template 'tritn'; valid: cuda, feedback, gluon, helion, "
                                          r"system, triton"):  # issue 56: gluon, helion
        PromptBuilder("triton", template="tritn")


def test_unknown_placeholder_and_stray_dollar(tmp_path: Path) -> None:
    (tmp_path / "bad.md").write_text("Solve $problem_sourse\n")
    with pytest.raises(PromptError, match=r"unknown placeholder\(s\) \$problem_sourse; valid: .*\$problem_source"):
        PromptBuilder("triton", template="bad", prompts_dir=tmp_path)
    (tmp_path / "dollar.md").write_text("Costs $5\n")
    with pytest.raises(PromptError, match=r"stray '\$' at line\(s\) 1"):
        PromptBuilder("triton", template="dollar", prompts_dir=tmp_path)
    (tmp_path / "fbx.md").write_text("$problem_source")  # a task placeholder in the feedback template
    with pytest.raises(PromptError, match="unknown placeholder"):
        PromptBuilder("triton", feedback="fbx", prompts_dir=tmp_path)


@pytest.mark.parametrize("kwargs, match", [
    ({"backend": "hip"}, "unknown backend 'hip'; valid: triton, cuda"),
    ({"context": "sliding"}, "unknown context policy 'sliding'; valid: full, last_k"),
    ({"context": "last_k", "last_k": 0}, "last_k must be an integer >= 1"),
    ({"hardware": "TPUv5"}, "unknown hardware preset 'TPUv5'; valid: auto, H100-SXM"),
])
def test_bad_settings(kwargs: dict, match: str) -> None:
    with pytest.raises(PromptError, match=match):
        PromptBuilder(**kwargs)


def test_from_config() -> None:
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"backend": "cuda", "context": "last_k", "last_k": 1, "hardware": {"GPU": "Test GPU", "SMs": 7}})
    builder = PromptBuilder.from_config(cfg)
    assert "- GPU: Test GPU\n- SMs: 7" in builder.first_prompt(PROBLEM)
    with pytest.raises(PromptError, match=r"unknown prompt key\(s\) window; valid: backend, context"):
        PromptBuilder.from_config({"window": 3})


def test_hardware_facts() -> None:
    assert hardware_facts(None) == {}
    assert hardware_facts({"GPU": "x"}) == {"GPU": "x"}
    assert hardware_facts("H200")["Memory bandwidth"] == "4.8 TB/s"
    assert preset_for_device_name("NVIDIA H100 80GB HBM3") == "H100-SXM"
    assert preset_for_device_name("NVIDIA H100 PCIe") == "H100-PCIe"
    assert preset_for_device_name("NVIDIA H100 NVL") is None
    assert preset_for_device_name("NVIDIA H200") == "H200"
    assert preset_for_device_name("NVIDIA A100-SXM4-80GB") == "A100-SXM4-80GB"
    assert preset_for_device_name("NVIDIA GeForce RTX 4090") is None
    for facts in HARDWARE_PRESETS.values():
        assert {"GPU", "SMs", "Memory bandwidth", "L2 cache", "Peak FP32 (CUDA cores)"} <= set(facts)


def test_auto_hardware_matches_this_machine() -> None:
    facts = hardware_facts("auto")
    if not torch.cuda.is_available():
        assert facts == {}
    else:
        props = torch.cuda.get_device_properties(0)
        assert facts["GPU"] == props.name and facts["SMs"] == props.multi_processor_count


def _example_problem():
    from problems.problem import problem_from_source

    source = (EXAMPLES_DIR / "add_relu_reference.py").read_text()
    if not torch.cuda.is_available():  # the Triton interpreter is slow: a smaller shape on CPU
        source = source.replace("M = 4096", "M = 64").replace("N = 4096", "N = 96")
    return problem_from_source(source, name="add_relu", problem_id="example/add_relu")


@pytest.mark.slow
def test_triton_worked_example_passes_the_evaluator() -> None:
    from eval import EvalConfig, Evaluator, Status

    with Evaluator(EvalConfig(device="auto", cache_dir=None)) as ev:
        result = ev.evaluate(_example_problem(), (EXAMPLES_DIR / "add_relu_triton.py").read_text(), backend="triton")
    assert result.status is Status.CORRECT, (result.reason, result.error)
    assert result.kernels is not None and "add_relu_kernel" in result.kernels.own_kernels_launched


@pytest.mark.gpu
def test_cuda_worked_example_passes_the_evaluator() -> None:
    from eval import EvalConfig, Evaluator, Status

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    with Evaluator(EvalConfig(device="cuda", cache_dir=None)) as ev:
        result = ev.evaluate(_example_problem(), (EXAMPLES_DIR / "add_relu_cuda.py").read_text(), backend="cuda")
    assert result.status is Status.CORRECT, (result.reason, result.error)


def test_hidden_parts_of_the_problem_never_reach_the_prompt() -> None:
    source = '''import torch
import torch.nn as nn

N = 512

# harness metadata
META = {"level": "level1", "small": {"N": 8}}


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []


# hidden shapes: 1234 and 777
def get_extra_inputs():
    return [[torch.randn(1234)], [torch.randn(777)]]
'''
    prompt = PromptBuilder("triton").first_prompt(source)
    assert "class Model(nn.Module):" in prompt and "def get_inputs():" in prompt and "N = 512" in prompt
    for hidden in ("META", "get_extra_inputs", "1234", "777", "harness metadata", '"small"'):
        assert hidden not in prompt


def test_problem_source_that_does_not_parse() -> None:
    with pytest.raises(PromptError, match="does not parse"):
        PromptBuilder("triton").first_prompt("class Model(:\n")


def test_custom_system_template_unescapes_dollars(tmp_path: Path) -> None:
    (tmp_path / "sys.md").write_text("You earn $$100 per kernel.\n")
    msgs = PromptBuilder("triton", system="sys", prompts_dir=tmp_path).messages(PROBLEM)
    assert msgs[0].content == "You earn $100 per kernel."

"""Code extraction from free-form agent replies."""

from __future__ import annotations

import pytest

from agents.extract import ExtractionError, code_blocks, defines_model_new, extract_code

MODEL = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def test_single_tagged_block_amid_prose() -> None:
    text = f"Here is my plan.\n\n```python\n{MODEL}```\n\nThis should be fast."
    assert extract_code(text) == MODEL


def test_missing_language_tag_and_tilde_fence() -> None:
    assert extract_code(f"```\n{MODEL}```") == MODEL
    assert extract_code(f"~~~\n{MODEL}~~~\ntrailing") == MODEL


def test_crlf_line_endings() -> None:
    text = f"Intro\r\n```python\r\n{MODEL.replace(chr(10), chr(13) + chr(10))}```\r\n"
    code = extract_code(text)
    assert "\r" not in code
    assert code == MODEL


def test_unterminated_final_fence_takes_rest_of_reply() -> None:
    code = extract_code(f"Sure:\n```python\n{MODEL}    def forward(self, x):\n        return x")
    assert code.startswith("import torch")
    assert code.rstrip().endswith("return x")


def test_indented_fence_is_dedented() -> None:
    text = "1. The code:\n\n   ```python\n   class ModelNew:\n       pass\n   ```\n"
    assert extract_code(text) == "class ModelNew:\n    pass\n"


def test_block_defining_model_new_wins_over_others() -> None:
    text = (
        "First a helper:\n```python\nimport triton\n```\n"
        f"Then the model:\n```python\n{MODEL}```\n"
        "And how to call it:\n```python\nm = ModelNew()\n```\n"
    )
    assert extract_code(text) == MODEL


def test_ten_code_blocks_last_model_new_wins_and_nothing_is_merged() -> None:
    parts = []
    for i in range(10):
        body = f"class ModelNew:\n    version = {i}\n" if i in (2, 6) else f"helper_{i} = {i}\n"
        parts.append(f"Step {i}:\n```python\n{body}```\n")
    code = extract_code("\n".join(parts))
    assert len(code_blocks("\n".join(parts))) == 10
    assert code == "class ModelNew:\n    version = 6\n"
    assert "helper_" not in code


def test_ten_code_blocks_none_with_model_new() -> None:
    text = "\n".join(f"```python\nx_{i} = {i}\n```" for i in range(10))
    with pytest.raises(ExtractionError, match=r"None of the 10 code block\(s\)"):
        extract_code(text)


@pytest.mark.parametrize("text", ["", "   \n\t ", None])
def test_empty_reply(text: str | None) -> None:
    with pytest.raises(ExtractionError, match="empty"):
        extract_code(text)  # type: ignore[arg-type]


def test_prose_only_reply() -> None:
    with pytest.raises(ExtractionError, match="no fenced code block"):
        extract_code("I would write a class ModelNew that tiles the matmul, but I am not sure how.")


def test_unfenced_reply_that_is_a_whole_module_is_accepted() -> None:
    assert extract_code(MODEL) == MODEL


def test_unfenced_reply_with_prose_is_refused() -> None:
    with pytest.raises(ExtractionError, match="no fenced code block"):
        extract_code(f"Here you go:\n{MODEL}")


def test_model_new_mentioned_in_a_comment_or_nested_does_not_count() -> None:
    assert not defines_model_new("# class ModelNew is below\nx = 1\n")
    assert not defines_model_new("def f():\n    class ModelNew:\n        pass\n")
    assert defines_model_new("import torch\nclass ModelNew(torch.nn.Module):\n    pass\n")
    assert not defines_model_new("class ModelNewer:\n    pass\n")
    assert defines_model_new("class Fast(torch.nn.Module):\n    pass\nModelNew = Fast\n")
    assert not defines_model_new("if ModelNew == 1:\n    pass\n")


def test_inner_fence_with_language_tag_does_not_close_a_block() -> None:
    blocks = code_blocks("````markdown\n```python\nx = 1\n```\n````\n")
    assert len(blocks) == 1
    assert blocks[0].info == "markdown"
    assert blocks[0].code == "```python\nx = 1\n```\n"
    assert blocks[0].closed


def test_error_is_an_agent_error_with_actionable_reason() -> None:
    from agents.base import AgentError

    with pytest.raises(AgentError) as info:
        extract_code("no code here")
    assert "class ModelNew" in str(info.value)

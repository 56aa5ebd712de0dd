"""`KernelEnv` (in-process and over HTTP) shows a rollout what `harness run`'s agents see; the TRL adapter drives a
real GRPO step of a tiny random model on CPU with rewards from a live `harness serve`; the verl adapter scores."""

from __future__ import annotations

import pytest

from agents import TurnRecord
from eval.feedback import render_feedback
from harness.app import prompt_builder
from harness.client import EvalClient
from harness.env import KernelEnv
from harness.verdict import extract_candidate
from harness.overrides import compose_config
from harness.serve.service import Service
from harness.corpus.hostile import GOOD, PROBLEM
from tests.serve_fixtures import Server, cpu_overrides, reply

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]
CUSTOM = {"source": PROBLEM, "name": "add_relu"}
PROSE = "I would fuse the add and the relu, but I have no code yet."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serverl")
    with Server([*cpu_overrides(tmp, workers=1), "--name", "rl", "--rewards", "tests.serve_reward_plugin"]) as s:
        s.tmp = tmp
        yield s


def loop_messages(overrides: list[str], history: list[TurnRecord]) -> list[dict[str, str]]:
    """What `harness run` would send after `history`, from the same config."""
    builder = prompt_builder(compose_config(overrides), "triton")
    return [{"role": m.role, "content": m.content} for m in builder.messages(PROBLEM, history)]


def test_env_in_process_is_the_loop(tmp_path):
    overrides = ["problems=all", *cpu_overrides(tmp_path, workers=1)]
    service = Service(overrides, name="env")
    try:
        env = KernelEnv(service, max_turns=2, reward="kevin")
        assert env.reset(CUSTOM) == loop_messages(overrides, [])
        messages, reward, done, info = env.step(PROSE)
        _, refused = extract_candidate(PROSE, "custom/add_relu", "triton")
        first = TurnRecord(turn=1, reply=PROSE, code=None, feedback=render_feedback(refused))
        assert info["status"] == "format_error" and reward == 0.0 and not done
        assert messages == loop_messages(overrides, [first])
        messages, reward, done, info = env.step(reply(GOOD))
        assert info["status"] == "correct" and reward == pytest.approx(0.3) and done
        assert info["returns"] == pytest.approx([0.4 * 0.3, 0.3])  # Kevin's discounted returns per turn
        second = TurnRecord(turn=2, reply=reply(GOOD), code=info["answer"]["code"], feedback=info["answer"]["feedback"])
        assert messages == loop_messages(overrides, [first, second])
        with pytest.raises(RuntimeError, match="reset"):
            env.step("again")
    finally:
        service.close()


def test_env_over_http_matches_in_process(server):
    env = KernelEnv(EvalClient(server.url), max_turns=2)
    overrides = ["problems=all", *cpu_overrides(server.tmp, workers=1)]
    assert env.reset(CUSTOM) == loop_messages(overrides, [])
    messages, reward, done, info = env.step(PROSE)
    _, refused = extract_candidate(PROSE, "custom/add_relu", "triton")
    assert reward == -1.0 and info["answer"]["feedback"] == render_feedback(refused)
    assert messages == loop_messages(overrides, [TurnRecord(1, PROSE, None, render_feedback(refused))])
    served = env.reset("L1/16_rms_norm")
    assert served == EvalClient(server.url).problem("L1/16_rms_norm")["messages"]


def test_verl_adapter(server, monkeypatch):
    from harness.rl import verl

    monkeypatch.setenv(verl.URL_ENV, server.url)
    monkeypatch.setattr(verl, "_client", None)
    assert verl.compute_score("kernels", PROSE, "L1/16_rms_norm") == -1.0
    scores = verl.compute_score_batch(["k", "k"], [reply(GOOD), PROSE], ["unused", "L1/13_softmax"],
                                      [{"problem": CUSTOM}, None])
    assert scores == [1.0, -1.0]


def test_trl_grpo_step_with_rewards_from_the_service(server, tmp_path):
    """One real GRPO step: a tiny random GPT-2 (built from a config, a word-level tokenizer made here; nothing
    downloaded); its completions are judged by the live service (format errors: it writes no code)."""
    try:
        import datasets
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as exc:
        pytest.fail(f'the rl extra is not installed ({exc}): pip install -e ".[cpu,test,ray,rl]" (the README test command)')

    from harness.rl.trl import TRLReward

    words = ["<pad>", "<unk>", "<eos>", "```python", "```", "class", "ModelNew", "import", "torch", "def",
             "forward", "return", "x", "write", "a", "kernel"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(words), n_positions=64, n_embd=16, n_layer=1, n_head=2,
                                       bos_token_id=2, eos_token_id=2, pad_token_id=0))
    seen: list[int] = []

    class Counting(TRLReward):
        def __call__(self, prompts, completions, **columns):
            out = super().__call__(prompts, completions, **columns)
            seen.append(len(out))
            return out

    reward = Counting(server.url)
    ds = datasets.Dataset.from_list([{"prompt": "write a kernel", "problem": "L1/16_rms_norm"}] * 4)
    config = GRPOConfig(output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=2, num_generations=2,
                        max_completion_length=6, max_steps=1, report_to=[], use_cpu=True, logging_steps=1,
                        save_strategy="no", seed=0)
    before = server.metrics().get('harness_serve_verdicts_total{status="format_error"}', 0)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=ds,
                          processing_class=tokenizer)
    trainer.train()
    assert trainer.state.global_step == 1
    logged = next(h for h in trainer.state.log_history if "rewards/harness_reward/mean" in h)
    assert logged["rewards/harness_reward/mean"] == -1.0  # the service's format_error penalty, not a local value
    after = server.metrics()['harness_serve_verdicts_total{status="format_error"}']
    assert sum(seen) >= 2 and after - before == sum(seen)
    assert all(a["status"] == "format_error" and a["problem"] == "L1/16_rms_norm" for a in reward.last_answers)


def test_a_reward_plugin_is_loaded_and_used(server):
    client = EvalClient(server.url)
    assert "twice" in client.health()["rewards"]
    assert client.evaluate(CUSTOM, reply(GOOD), reward="twice", turn=3)["reward"] == 6.0
    assert client.evaluate(CUSTOM, PROSE, reward="twice")["reward"] == 0.0

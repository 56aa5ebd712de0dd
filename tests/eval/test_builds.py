"""The builder's bound on disk (`eval.builds.Builder`): a folder an evaluation holds is never removed; identical
sources are built once while one is held; past `kept_bytes`, the oldest folders nobody holds go, those an
evaluation has loaded before those built ahead and not yet evaluated.

The bookkeeping is the real Builder's; only its build step (`_build`, a sandboxed worker running the candidate's
`load_inline`, a minute of CPU: tests/eval/test_cuda_cpu.py builds for real) is replaced by one that writes a
folder of a known size, each build waiting for its test to let it finish.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from eval.crossing import protocol
from eval.builds import BUILT_AGAIN_ALONE, Build, Builder, build_note

UNIT = 1000  # bytes each build writes


class _Builder(Builder):
    """A Builder whose builds write `UNIT` bytes into their folder once their source's gate opens."""

    def __init__(self, kept_bytes: int):
        super().__init__(parallel=4, arch="9.0", gpu_available=False, timeout_s=60, log_cap_bytes=1 << 12,
                         isolate_network=True, extra_env={}, versions={}, kept_bytes=kept_bytes)
        self.built: list[str] = []
        self.gates: dict[str, threading.Event] = {}

    def gate(self, source: str) -> threading.Event:
        return self.gates.setdefault(source, threading.Event())

    def _build(self, source: str, ext_dir: Path) -> Build:
        self.built.append(source)
        assert self.gate(source).wait(60), f"the test never let {source!r} finish"
        ext_dir.mkdir(parents=True)
        (ext_dir / "lib.so").write_bytes(b"x" * UNIT)
        return Build(ok=True, extensions_dir=str(ext_dir))


def _closing(kind: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """A fixture's maker of `kind` builders; afterwards every gate is opened and every builder closed."""
    made: list[Any] = []

    def _make(*args: Any, **kwargs: Any) -> Any:
        made.append(kind(*args, **kwargs))
        return made[-1]

    yield _make
    for builder in made:
        for gate in builder.gates.values():
            gate.set()
        builder.close()


@pytest.fixture
def make() -> Iterator:
    yield from _closing(_Builder)


def _finish(builder: _Builder, source: str) -> Path:
    """Let `source`'s build finish and wait until the builder has measured it (and trimmed); its folder."""
    builder.gate(source).set()
    build = builder.submit(source).result()
    deadline = time.monotonic() + 60  # a hang guard only
    while any(e.future.done() and e.size == 0 for e in list(builder._entries.values())):
        assert time.monotonic() < deadline, "a finished build was never measured"
        time.sleep(0.01)
    return Path(build.extensions_dir)


def test_a_held_folder_stays_until_released_even_with_nothing_kept(make) -> None:
    builder = make(kept_bytes=0)
    first, second = builder.claim("a"), builder.claim("a")  # two evaluations of one source: one build
    folder = _finish(builder, "a")
    assert builder.built == ["a"] and first.result() is second.result()
    assert folder.is_dir() and list(builder.kept().values()) == [folder]
    first.release()
    first.release()  # once only: the second evaluation still holds it
    assert folder.is_dir()
    second.release()
    assert not folder.exists() and builder.kept() == {}
    again = builder.claim("a")  # dropped, so the same source is built again, in a folder of its own
    assert _finish(builder, "a") != folder and builder.built == ["a", "a"]
    again.release()


def test_a_source_claimed_while_it_builds_joins_that_build(make) -> None:
    builder = make(kept_bytes=0)
    ahead = builder.submit("b")  # built ahead (`prebuild`): nothing holds it yet
    claim = builder.claim("b")  # its evaluation arrives while it builds
    assert claim.future is ahead
    folder = _finish(builder, "b")
    assert folder.is_dir() and builder.built == ["b"]
    claim.release()
    assert not folder.exists()


def test_past_the_bound_the_oldest_loaded_folders_go_before_those_waiting_for_their_evaluation(make) -> None:
    builder = make(kept_bytes=2 * UNIT)
    folders = {}
    for source in ("old", "ahead", "new"):
        claim = builder.claim(source) if source != "ahead" else None
        folders[source] = _finish(builder, source)
        if claim is not None:
            claim.release()  # evaluated and loaded: kept while the bound allows
    # three finished folders, nobody holding them, two fit: "old" goes (loaded, oldest); "ahead" is older than
    # "new" but still waits for its evaluation, so "new" would go before it
    assert set(builder.kept().values()) == {folders["ahead"], folders["new"]}
    assert not folders["old"].exists() and folders["ahead"].is_dir() and folders["new"].is_dir()
    held = builder.claim("new")
    fourth = builder.claim("fourth")
    _finish(builder, "fourth")
    fourth.release()  # idle now: "ahead" and "fourth" (2 units); "new" is held and never counted or removed
    assert set(builder.kept().values()) == {folders["ahead"], folders["new"], Path(fourth.result().extensions_dir)}
    builder._kept_bytes = UNIT
    held.release()  # three idle, one fits: loaded ones go first ("fourth", then "new"), "ahead" stays
    assert list(builder.kept().values()) == [folders["ahead"]]
    assert builder.built == ["old", "ahead", "new", "fourth"]


def test_the_build_note_names_what_the_verdict_should_know_and_bounds_what_the_candidate_wrote() -> None:
    """A caught failure, a failed build made for a call in forward, and calls the limit cut off (names read from a
    record candidate code wrote: at most five are named)."""
    reply = protocol.PrepareReply(handled="Error building extension 'a'\nits log", lazy_failed="Error building 'b'\n")
    note = build_note(reply, False, [f"c{i}" for i in range(7)], 180.0)
    assert "the candidate caught the error, so it runs its own fallback" in note and "'a'" in note
    assert "its log" not in note  # first lines only
    assert "a load_inline build made in forward, built ahead, failed" in note and "Error building 'b'" in note
    assert "load_inline('c0', 'c1', 'c2', 'c3', 'c4' and 2 more)" in note and "c5" not in note
    assert "limit of 180 s ran out (eval.import_timeout_s)" in note
    assert build_note(protocol.PrepareReply(), True, [], 180.0).startswith("compiled with nvcc (compile-only check)")
    assert build_note(protocol.PrepareReply(ok=False, error="boom", lazy_failed="x"), False, ["c0"], 180.0) == ""


class _TimingBuilder(Builder):
    """A Builder whose attempts (`_attempt`, the sandboxed build) wait for their test's gate and then time out as
    often as `timeouts[source]` says; `events` records each attempt's start and end in order."""

    def __init__(self, timeouts: dict[str, int]):
        super().__init__(parallel=4, arch="9.0", gpu_available=False, timeout_s=60, log_cap_bytes=1 << 12,
                         isolate_network=True, extra_env={}, versions={}, kept_bytes=0)
        self.timeouts = dict(timeouts)
        self.gates = {source: threading.Event() for source in ("slow", "quick", "late")}
        self.events: list[str] = []  # "start slow", "end slow", ...

    def _attempt(self, source: str, ext_dir: Path) -> Build:
        self.events.append(f"start {source}")
        assert self.gates[source].wait(60), f"the test never let {source!r} go on"
        self.events.append(f"end {source}")
        if self.timeouts.get(source, 0) > 0:
            self.timeouts[source] -= 1
            return Build(ok=False, error="building took longer than 60 s\nits output", timed_out=True)
        ext_dir.mkdir(parents=True, exist_ok=True)
        return Build(ok=True, extensions_dir=str(ext_dir))

    def attempts(self, source: str) -> int:
        return self.events.count(f"start {source}")


@pytest.fixture
def timing() -> Iterator:
    yield from _closing(_TimingBuilder)


def _wait_for(builder: _TimingBuilder, *events: str) -> None:
    deadline = time.monotonic() + 60  # a hang guard only
    while not set(events) <= set(builder.events):
        assert time.monotonic() < deadline, f"{events} never happened"
        time.sleep(0.01)


def test_a_build_out_of_time_beside_another_is_built_again_alone_and_judged_by_that(timing) -> None:
    """Company stretches a wall-clock limit: the verdict comes from the attempt with no other build running, and
    a build submitted meanwhile starts only once that attempt has ended."""
    builder = timing({"slow": 1})
    slow, quick = builder.submit("slow"), builder.submit("quick")
    _wait_for(builder, "start slow", "start quick")
    builder.gates["slow"].set()  # times out while "quick" still builds
    _wait_for(builder, "end slow")
    late = builder.submit("late")
    builder.gates["late"].set()
    builder.gates["quick"].set()
    assert slow.result().ok and quick.result().ok and late.result().ok
    assert builder.attempts("slow") == 2 and builder.attempts("quick") == 1
    second = builder.events.index("start slow", builder.events.index("end slow") + 1)
    before = builder.events[:second]
    running = [e for e in before if e.startswith("start") and f"end {e[6:]}" not in before]
    assert not running and builder.events[second + 1] == "end slow", \
        f"the second attempt ran beside another build: {builder.events}"
    assert builder.events.index("start late") > second + 1


def test_a_build_out_of_time_alone_is_not_built_again(timing) -> None:
    builder = timing({"slow": 5})
    builder.gates["slow"].set()
    build = builder.submit("slow").result()
    assert not build.ok and build.timed_out and builder.attempts("slow") == 1
    assert BUILT_AGAIN_ALONE not in build.error


def test_a_build_out_of_time_beside_another_and_again_alone_says_both(timing) -> None:
    builder = timing({"slow": 2})
    slow, _ = builder.submit("slow"), builder.submit("quick")
    _wait_for(builder, "start slow", "start quick")
    builder.gates["slow"].set()
    builder.gates["quick"].set()
    build = slow.result()
    assert not build.ok and builder.attempts("slow") == 2
    assert build.error.startswith(f"building took longer than 60 s, {BUILT_AGAIN_ALONE}\nits output")

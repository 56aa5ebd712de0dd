"""The settings of each executor (`executor=local|ray`): their keys, types and defaults, in one place.

Apart from `harness.executors` (which loads the evaluator) so that registering the config schemas
(`harness.conf`), and so checking a command line or printing `--help`, loads no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


class ExecutorError(ValueError):
    """A config or cluster the run cannot start with; the message is one line for the user."""


@dataclass
class LocalExecutorConfig:
    """`executor=local`: evaluations run on this machine, one warm worker pool per visible GPU (`eval.gpus`)."""

    kind: str = "local"


@dataclass
class ExecutorConfig:
    """`executor=ray`: evaluations run on a Ray cluster, one evaluator actor per GPU, each the trusted parent
    of its own warm worker pool; this process keeps the agents, the loop and the run store. Needs the ray
    extra (pip install -e ".[ray]").

    address: null starts a local Ray instance; `auto` joins the cluster of this machine
      (`ray start`), `ray://host:10001` joins a remote one through Ray Client.
    num_actors: evaluator actors; null: one per GPU of the cluster, or on a CPU-only cluster
      half its CPUs (1 to 4).
    max_in_flight_per_actor: evaluations sent to one actor at once (back-pressure); 0: its number
      of warm workers (`eval.workers_per_gpu`). Builds sent ahead to an actor take none of these.
    cpus_per_actor: Ray CPUs each GPU actor reserves; null: the cluster's CPUs over its GPUs. Ray
      sets an actor's OMP_NUM_THREADS to it, so torch's CPU work in the actor (the parent side of
      the evaluation) gets that many threads; with 1 it ran single-threaded.
    max_retries: how often an evaluation whose actor died is sent to another actor.
    actor_start_timeout_s: how long to wait for an actor (and a replacement) to be ready.
    namespace: the Ray namespace of the actors (named kh-eval-<host>-<pid>-<time>-<n>).
    """

    kind: str = "ray"
    address: Optional[str] = None
    num_actors: Optional[int] = None
    max_in_flight_per_actor: int = 0
    cpus_per_actor: Optional[int] = None
    max_retries: int = 2
    actor_start_timeout_s: float = 600.0
    namespace: str = "kernel-harness"

    def __post_init__(self) -> None:
        problems = []
        if self.kind != "ray":
            problems.append(f"ExecutorConfig holds the ray executor's settings: executor.kind must be ray, not {self.kind!r}")
        if self.num_actors is not None and (isinstance(self.num_actors, bool) or int(self.num_actors) < 1):
            problems.append(f"executor.num_actors must be >= 1 or null, not {self.num_actors!r}")
        if self.max_in_flight_per_actor < 0:
            problems.append(f"executor.max_in_flight_per_actor must be >= 0, not {self.max_in_flight_per_actor!r}")
        if self.cpus_per_actor is not None and (isinstance(self.cpus_per_actor, bool) or int(self.cpus_per_actor) < 1):
            problems.append(f"executor.cpus_per_actor must be >= 1 or null, not {self.cpus_per_actor!r}")
        if self.max_retries < 0:
            problems.append(f"executor.max_retries must be >= 0, not {self.max_retries!r}")
        if not self.actor_start_timeout_s > 0:
            problems.append(f"executor.actor_start_timeout_s must be > 0, not {self.actor_start_timeout_s!r}")
        if problems:
            raise ExecutorError("; ".join(problems))
        if self.address is not None:
            self.address = str(self.address)


# Each `executor=KIND`'s settings (its Hydra schema, registered in `harness.conf`).
EXECUTORS: dict[str, type] = {cls.kind: cls for cls in (LocalExecutorConfig, ExecutorConfig)}

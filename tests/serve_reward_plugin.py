"""A reward plugin as a user would write one: `harness serve --rewards tests.serve_reward_plugin --reward twice`."""

from harness.serve.rewards import register

register("twice", lambda result, turn: 2.0 * float(result.is_correct) * turn)

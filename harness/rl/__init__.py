"""Adapters that plug `harness serve` into RL trainers: `harness.rl.trl` (TRL's GRPOTrainer) and
`harness.rl.verl` (verl's custom reward function). Both call the service through `harness.client.EvalClient`."""

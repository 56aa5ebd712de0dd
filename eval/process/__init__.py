"""The worker processes: the sandbox that confines them (`sandbox`), the pool that leases them (`pool`), and the OS
plumbing under both: CPU affinity (`_affinity`), memory cgroups (`_memcg`), pid limits (`_pids`), process trees
(`_proctree`), reaping what a process leaves (`_reaper`), freezing (`_freeze`) and the memory watchdog (`_watchdog`).
Nothing is re-exported here: importers name the module."""

"""The worker processes: the sandbox that spawns and kills them (`sandbox`), what a confined worker sees and the
command that confines it (`confine`), the pool that leases them (`pool`), and the OS plumbing under both: CPU affinity
(`_affinity`), memory cgroups (`_memcg`), pid limits (`_pids`), process trees (`_proctree`), reaping what a process
leaves (`_reaper`), freezing (`_freeze`), the memory watchdog (`_watchdog`) and a worker's capped log
(`_capped_output`). Nothing is re-exported here: importers name the module."""

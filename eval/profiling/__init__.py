"""Hardware-counter profiles of correct candidates, for the agent's next turn and the report (issue 57).

A profile is a diagnostic, never a verdict figure: it runs after the verdict, off the timing path, in a process of
its own that Nsight Compute (`ncu`) starts in the same sandbox a worker runs in, and what comes back is the
candidate's to forge. The stored types are `eval.profile_record` (outside this room: results and settings hold
them, below everything here); `ncu` holds the command line and the parsing of ncu's raw CSV,
`profiler` the parent's side (the processes, their bounds, the reference's cached profile), `render` the capped
text block of the feedback.
"""

"""The worker's native sources: the timed loop (timed_loop.c) and its capture kernels (capture.cu), built and loaded
through `eval.crossing._native_build`."""

"""Live re-profiling: one engine (`engine`: captures in fresh subprocesses, debounced and cancellable; `compare`:
what changed since the previous run and the pinned baseline) under several front ends (`stepscope watch` and its
page, the notebook magic, the language server)."""

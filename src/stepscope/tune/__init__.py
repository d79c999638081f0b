"""`stepscope tune`: the fixes a diagnosis calls for, applied to the user's unmodified program from outside (patches
installed in a child process), each measured without the profiler against the configuration it builds on, kept
only when faster beyond the noise with its numerics intact; a ladder of measured rungs and a patch to apply."""

"""The PyTorch profiler (Kineto) Chrome-trace JSON reader: .json, .json.gz, every dialect in the wild.

`reader` decodes the file, `columns` turns its events into the model's columns, `schema` types what is read,
`dialect` holds the dialect differences as data, `meta` the trace's metadata, `repair` the repairs of JSON
that real tools write, `values` and `inputs` the loosely typed values and the recorded op inputs.
"""

from stepscope.trace.kineto.reader import document, read_kineto

__all__ = ["document", "read_kineto"]

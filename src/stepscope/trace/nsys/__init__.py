"""The Nsight Systems reader: SQLite exports (`nsys export --type sqlite`) and .nsys-rep through `nsys`.

`reader` assembles the columns, `db` wraps the open export, `gpu` and `host` read its activity and thread
tables, `meta` its devices, names and clock, `export` runs `nsys export` on a report.
"""

from stepscope.trace.nsys.export import export_and_read
from stepscope.trace.nsys.reader import read_nsys

__all__ = ["export_and_read", "read_nsys"]

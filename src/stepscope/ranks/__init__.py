"""Many ranks of one distributed job: a small summary per rank file, mapped over an executor (a local process
pool, Dask or Ray), then reduced on the driver into cross-rank figures (collective skew, stragglers, exposed
communication). Only summaries travel to the driver, never traces."""

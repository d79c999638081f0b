"""Pure analyses: each a function of a Trace (and the steps) returning a frozen dataclass of figures."""

"""Live front ends over one engine: `stepscope watch`, its page, the notebook magic and the language server."""

"""One module per CLI verb, each with add_parser(subparsers) and a handler(args) -> exit code."""

"""Names from a trace, bounded: a name of megabytes would cost every regex and every report line."""

from __future__ import annotations

MAX_NAME_CHARS = 4096  # the longest real kernel names (templated C++) run to about 2,000 characters


def bounded_name(name: str) -> str:
    """`name` itself when short enough; else its first MAX_NAME_CHARS characters and a hash of the whole,
    so that two long names that differ late stay two names."""
    if len(name) <= MAX_NAME_CHARS:
        return name
    import hashlib  # here: it loads OpenSSL (~3 MB), which only a long name needs

    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
    return f"{name[:MAX_NAME_CHARS]}... [{len(name):,} characters, #{digest}]"

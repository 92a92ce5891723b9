"""Process helpers shared by the tests that kill runs and look for what is left."""
from pathlib import Path


def cmdline(pid: int, limit: int | None = None) -> str:
    """The command line of process ``pid`` (spaces for NULs, cut to ``limit`` characters), "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:limit]
    except OSError:
        return ""

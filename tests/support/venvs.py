"""Fresh virtual environments in tests: where an environment installs pure-Python packages."""

from __future__ import annotations

import subprocess
from pathlib import Path


def purelib(python: Path) -> Path:
    """The site-packages folder (sysconfig's purelib) of the environment PYTHON runs in."""
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())

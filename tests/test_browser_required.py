"""The browser tests cannot pass unseen in CI: without Chromium they skip on a developer's machine and fail where
CI is set (CI runs `bash .ci/run` with CI=true). And scripts/install-chromium installs the browser even when
`apt-get update` fails (one unsigned or unreachable source fails it, while the packages still install)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def browser_test_in(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run one browser test in a fresh pytest whose PATH holds no Chromium (an empty folder)."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("CI", "STEPSCOPE_CHROMIUM", "STEPSCOPE_CHROMEDRIVER") and not k.startswith("PYTEST_")}
    clean.update(PATH=str(tmp_path), **env)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "tests/test_predict_html_browser.py"], cwd=ROOT, env=clean, capture_output=True,
                          text=True, timeout=120)


def test_without_chromium_a_browser_test_skips(tmp_path: Path) -> None:
    done = browser_test_in(tmp_path)
    assert done.returncode == 0 and "1 skipped" in done.stdout, done.stdout
    assert "Chromium or chromedriver is not installed" in done.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_without_chromium_under_ci_a_browser_test_fails(tmp_path: Path, ci: str) -> None:
    done = browser_test_in(tmp_path, CI=ci)
    assert done.returncode == 1 and "1 error" in done.stdout, done.stdout
    assert "Chromium or chromedriver is not installed" in done.stdout
    assert "CI must run the browser tests" in done.stdout


# A stand-in apt-get: `update` fails as it does with one unsigned source; `install` puts the two programs on PATH.
APT_GET = """#!/bin/bash
echo "$*" >> "$(dirname "$0")/apt.log"
case "$1" in
  update) echo "E: The repository 'http://example.invalid stable InRelease' is not signed." >&2; exit 100 ;;
  install) for p in chromium chromedriver; do printf '#!/bin/sh\\n' > "$(dirname "$0")/$p"; \
             chmod +x "$(dirname "$0")/$p"; done ;;
esac
"""


def test_install_goes_on_when_apt_get_update_fails(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("scripts/install-chromium installs only as root")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(APT_GET)
    (bin_dir / "apt-get").chmod(0o755)
    for tool in ("id", "dirname", "chmod"):  # what the scripts call, and nothing else (no Chromium)
        (bin_dir / tool).symlink_to(shutil.which(tool))  # type: ignore[arg-type]
    done = subprocess.run(["/bin/bash", str(ROOT / "scripts" / "install-chromium")], capture_output=True, text=True,
                          env={"PATH": str(bin_dir)}, timeout=60)
    assert done.returncode == 0
    assert (bin_dir / "apt.log").read_text().split("\n")[:2] == [
        "update -qq", "install -y -qq chromium chromium-driver"]
    assert (bin_dir / "chromium").exists() and (bin_dir / "chromedriver").exists()
    assert "apt-get update failed" in done.stderr and "could not install" not in done.stderr

"""`stepscope analyze` on rank folders from the command line: bad files listed and the rest analysed (exit 0,
or 2 with --strict), ranks claimed twice, globs and list files, the terminal and HTML sections."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stepscope.commands.ranks import take_paths_from_ray
from stepscope.errors import StepscopeError
from stepscope.ranks.inputs import rank_files

JOB = Path(__file__).parent / "data" / "gloo_ddp" / "dataloader_straggler"


def _run(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stepscope", "analyze", *map(str, args), "--width", "140"],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def job(tmp_path: Path) -> Path:
    folder = tmp_path / "job"
    shutil.copytree(JOB, folder)
    return folder


def test_bad_files_are_listed_and_the_good_ranks_analysed(job: Path, tmp_path: Path) -> None:
    (job / "notes.json").write_text('{"lr": 0.1}')
    (job / "rank9.json.gz").write_bytes((job / "rank1.json.gz").read_bytes()[:500])  # truncated gzip
    out = tmp_path / "r.json"
    done = _run(job, "--json", out)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "2 of 6 rank files could not be analysed" in done.stderr
    assert f"{job / 'notes.json'}: not a PyTorch profiler trace" in done.stderr
    assert f"{job / 'rank9.json.gz'}: truncated gzip (the file ends inside the compressed data" in done.stderr
    cr = json.loads(out.read_text())["cross_rank"]
    assert cr["ranks"] == 4 and {Path(f["path"]).name for f in cr["failures"]} == {"notes.json", "rank9.json.gz"}
    assert cr["straggler"]["rank"] == 2
    assert "Straggler: rank 2 arrived last" in done.stdout


def test_strict_fails_on_a_bad_file(job: Path) -> None:
    (job / "notes.json").write_text("[1, 2")
    done = _run(job, "--strict", "--workers", "1")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("stepscope: error: 1 of 5 rank files could not be analysed;")
    assert "notes.json" in done.stderr and "without --strict" in done.stderr


def test_no_good_file_at_all_is_an_error(tmp_path: Path) -> None:
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text("{}")
    done = _run(tmp_path, "--workers", "1")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "none of the 2 rank files could be analysed" in done.stderr


def test_two_files_claiming_one_rank_are_warned_about(job: Path, tmp_path: Path) -> None:
    shutil.copy(job / "rank0.json.gz", job / "copy_of_rank0.json.gz")
    out = tmp_path / "r.json"
    done = _run(job, "--workers", "1", "--json", out)
    assert done.returncode == 0
    assert "rank 0 claimed by more than one file" in done.stderr
    cr = json.loads(out.read_text())["cross_rank"]
    assert cr["duplicate_ranks"] == [0] and cr["ranks"] == 5


def test_globs_and_list_files(job: Path, tmp_path: Path) -> None:
    listing = tmp_path / "ranks.txt"
    listing.write_text("# the job's ranks\njob/rank0.json.gz\n\njob/rank[1-3].json.gz\n")
    for args in ([str(job / "rank*.json.gz")], [f"@{listing}"], [str(listing)]):
        out = tmp_path / "r.json"
        done = _run(*args, "--workers", "1", "--json", out, "--quiet")
        assert done.returncode == 0, (args, done.stderr)
        doc = json.loads(out.read_text())
        assert sorted(Path(p).name for p in doc["source"]["paths"]) == [f"rank{r}.json.gz" for r in range(4)]
    done = _run(str(job / "nothing*.json"))
    assert done.returncode == 2 and "no file matches this pattern" in done.stderr


def test_html_has_the_heatmap_and_the_straggler_table(job: Path, tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    done = _run(job, "--workers", "1", "--html", page, "--quiet")
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert 'id="fig-ranks"' in html and 'id="table-straggler"' in html and 'id="table-ranks"' in html
    assert "DataLoader wait" in html


def test_perfetto_needs_one_trace(job: Path, tmp_path: Path) -> None:
    done = _run(job, "--perfetto", tmp_path / "t.json.gz")
    assert done.returncode == 2 and "--perfetto annotates one trace, and 4 were given" in done.stderr


def test_ray_takes_a_folder_after_it_as_a_path(job: Path) -> None:
    args = argparse.Namespace(ray=str(job), paths=[])
    take_paths_from_ray(args)
    assert args.paths == [str(job)] and args.ray == ""
    args = argparse.Namespace(ray="ray://head:10001", paths=[str(job)])
    take_paths_from_ray(args)
    assert args.ray == "ray://head:10001"


def test_heatmap_is_drawn_in_a_real_browser(job: Path, tmp_path: Path) -> None:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from test_html_browser import CHROMIUM, DRIVER, FLAGS

    if not CHROMIUM or not DRIVER:
        pytest.skip("Chromium or chromedriver is not installed")
    page = tmp_path / "r.html"
    assert _run(job, "--workers", "1", "--html", page, "--quiet").returncode == 0
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    from selenium.webdriver.chrome.service import Service

    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        driver.get(page.as_uri())
        cells, deadline = 0, time.monotonic() + 10
        while not cells and time.monotonic() < deadline:  # plotly draws the heatmap's image after the page loads:
            cells = driver.execute_script("return document.querySelectorAll('#fig-ranks .heatmaplayer image, "
                                          "#fig-ranks .hm').length")  # on a busy machine, not yet (CI saw 0 once)
            time.sleep(0.1)
        labels = driver.execute_script("return Array.from(document.querySelectorAll('#fig-ranks .ytick text'))"
                                       ".map(t => t.textContent)")
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        driver.quit()
    assert cells >= 1 and sorted(labels) == [f"rank {r}" for r in range(4)]
    assert not errors


def test_a_folder_of_run_folders_is_the_ranks_in_them(tmp_path: Path) -> None:
    """`stepscope run` under torchrun writes rank<N>/ run folders in a job folder: the job folder names the ranks."""
    runs = tmp_path / "stepscope-runs"
    for rank in range(4):
        (runs / f"rank{rank}").mkdir(parents=True)
        shutil.copy(JOB / f"rank{rank}.json.gz", runs / f"rank{rank}" / "trace.json.gz")
    (runs / "notes").mkdir()  # a folder that is no run folder is left alone
    assert rank_files([runs]) == [runs / f"rank{rank}" / "trace.json.gz" for rank in range(4)]
    with pytest.raises(StepscopeError, match=r"holds no traces .*or stepscope run folders"):
        rank_files([runs / "notes"])

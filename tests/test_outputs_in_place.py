"""Outputs the user names (--json, --html, --perfetto): a device, a FIFO, a descriptor or a link is written where it
is and stays what it was; a regular file is written atomically; names no file can have are refused before any work.

The device tests run stepscope as root in a private mount namespace whose /dev is a fresh tmpfs holding its own
null and full devices: the machine's own /dev is never touched (the driver stops if the tmpfs did not take)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import ON_CI, kineto_trace
from stepscope.cli import main

DATA = Path(__file__).parent / "data"
PREDICT_TRACE = DATA / "gpu_h100" / "input_bound" / "trace.json.gz"
OPT_OUT = "STEPSCOPE_NO_NAMESPACE_TESTS"  # set to skip the namespace tests on a CI whose root may not unshare

# Run inside `unshare --mount`: a tmpfs over /dev, checked to be a new filesystem before anything is made in it.
DRIVER = r"""
import json, os, stat, subprocess, sys
outside, commands = int(sys.argv[1]), json.loads(sys.argv[2])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=755", "stepscope-test-dev", "/dev"], check=True)
if os.stat("/dev").st_dev == outside:
    sys.exit("the private /dev did not take: stopping before anything is made in the machine's")
os.mknod("/dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
os.mknod("/dev/full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
os.symlink("/proc/self/fd/1", "/dev/stdout")

def state():
    out = {}
    for name in sorted(os.listdir("/dev")):
        st = os.lstat("/dev/" + name)
        kind = "char" if stat.S_ISCHR(st.st_mode) else "link" if stat.S_ISLNK(st.st_mode) else "other"
        out[name] = [kind, os.readlink("/dev/" + name) if kind == "link" else [os.major(st.st_rdev),
                                                                                  os.minor(st.st_rdev)]]
    return out

results = []
for argv in commands:
    done = subprocess.run([sys.executable, "-m", "stepscope", *argv], capture_output=True, text=True)
    results.append({"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "dev": state()})
print(json.dumps(results))
"""
DEV_AS_MADE = {"full": ["char", [1, 7]], "null": ["char", [1, 3]], "stdout": ["link", "/proc/self/fd/1"]}


def _namespace_refusal() -> str | None:
    """Why the namespace tests cannot run here, or None."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "needs root on Linux (device nodes can be made only as root, in a private mount namespace)"
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    return None if done.returncode == 0 else f"unshare --mount is not permitted here ({done.stderr.strip()})"


def _in_private_dev(*commands: list[str]) -> list[dict]:
    refusal = _namespace_refusal()
    if refusal is not None:
        if ON_CI and os.geteuid() == 0 and not os.environ.get(OPT_OUT):
            pytest.fail(f"{refusal}: as root under CI the device tests must run (or set {OPT_OUT}=1 to skip them)")
        pytest.skip(refusal)
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", DRIVER,
                           str(os.stat("/dev").st_dev), json.dumps(commands)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_devices_get_the_output_and_stay_devices(tmp_path: Path) -> None:
    trace = str(kineto_trace("a100_event_sync_tiny.json.gz"))
    saved = tmp_path / "report.json"
    assert main(["analyze", trace, "--json", str(saved), "-q"]) == 0
    results = _in_private_dev(
        ["analyze", trace, "--json", "/dev/null", "--html", "/dev/null", "-q"],
        ["analyze", trace, "--perfetto", "/dev/null", "-q"],
        ["report", str(saved), "--json", "/dev/null", "-q"],
        ["diff", trace, trace, "--html", "/dev/null", "-q"],
        ["predict", str(PREDICT_TRACE), "--gpu", "h100", "--json", "/dev/null", "-q"],
        ["analyze", trace, "--json", "/dev/full", "-q"],
        ["analyze", trace, "--json", "/dev/stdout", "-q"],
    )
    for result in results:  # unchanged after every command: mknod's devices, the link to the descriptor
        assert result["dev"] == DEV_AS_MADE, result
    assert [r["rc"] for r in results] == [0, 0, 0, 0, 0, 2, 0], results
    assert all(r["stderr"] == "" for r in results[:5]), results
    full = results[5]["stderr"].splitlines()
    assert full[0] == "stepscope: error: /dev/full: cannot write the JSON report (no space left on device)", full
    assert json.loads(results[6]["stdout"])["schema"] == "stepscope.report/1"  # the link's target got it


def test_a_fifo_gets_the_output_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    assert main(["analyze", str(kineto_trace("a100_event_sync_tiny.json.gz")), "--json", str(fifo), "-q"]) == 0
    reader.join(30)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(received[0])["schema"] == "stepscope.report/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.fifo"]  # no temporary file left beside it


def test_a_link_to_a_file_stays_a_link_and_its_target_is_written(tmp_path: Path) -> None:
    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("earlier")
    link.symlink_to(target.name)
    assert main(["analyze", str(kineto_trace("a100_event_sync_tiny.json.gz")), "--json", str(link), "-q"]) == 0
    assert link.is_symlink() and os.readlink(link) == "real.json"
    assert json.loads(target.read_bytes())["schema"] == "stepscope.report/1"


def test_a_process_descriptor_is_written_in_place(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "stepscope", "analyze",
                           str(kineto_trace("a100_event_sync_tiny.json.gz")), "--json", "/proc/self/fd/1", "-q"],
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schema"] == "stepscope.report/1"


def test_a_read_only_file_is_not_replaced(tmp_path: Path, capsys) -> None:
    kept = tmp_path / "kept.json"
    kept.write_text("earlier")
    kept.chmod(0o444)  # root may replace it by rename: stepscope must not
    assert main(["analyze", str(kineto_trace("a100_event_sync_tiny.json.gz")), "--json", str(kept), "-q"]) == 2
    assert kept.read_text() == "earlier" and stat.S_IMODE(kept.stat().st_mode) == 0o444
    assert "is read-only" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "message"), [
    ("", "an empty file name was given for the --json output"),
    ("r" * 256 + ".json", "a name in this path is 261 bytes long, over the 255"),
    (".", ".: is a folder; give a file name"),
])
def test_names_no_file_can_have_are_refused_before_any_work(name: str, message: str, capsys) -> None:
    # the trace is not there: an error about the name, not the trace, shows the name was checked first
    assert main(["analyze", "no-such-trace.json", "--json", name]) == 2
    err = capsys.readouterr().err.splitlines()
    assert message in err[0] and "no-such-trace" not in "\n".join(err), err


def test_one_output_to_stdout_and_the_terminal_report_to_stderr(capsys) -> None:
    trace = str(kineto_trace("a100_event_sync_tiny.json.gz"))
    assert main(["analyze", trace, "--html", "-"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("<!doctype html>") and out.rstrip().endswith("</html>")  # the page alone
    assert "verdict" in err
    assert main(["analyze", trace, "--html", "-", "--json", "-"]) == 2
    assert "only one output can go to stdout" in capsys.readouterr().err


def test_the_annotated_trace_to_stdout_is_whole_json(capsysbinary) -> None:
    trace = str(kineto_trace("a100_event_sync_tiny.json.gz"))
    assert main(["analyze", trace, "--perfetto", "-", "-q"]) == 0
    assert json.loads(capsysbinary.readouterr().out)["traceEvents"]

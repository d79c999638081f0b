"""`stepscope predict` and `--predict` on analyze: what each accepts, writes and refuses (one line, no traceback)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builder import cpu_bound_trace
from conftest import kineto_trace
from stepscope.cli import main

DATA = Path(__file__).parent / "data"
CONTRACT_ORIGIN = {"gpu", "step_time_us", "energy_j_per_step"}
CONTRACT_TARGET = {"gpu", "step_time_us", "low_us", "high_us", "samples_per_s", "bottleneck", "price_per_gpu_hour",
                   "cost_per_million_samples", "energy_j_per_step", "assumptions"}
EXTRA_ORIGIN = {"name", "samples_per_s", "bottleneck", "gpu_utilization", "power_w"}
EXTRA_TARGET = {"name", "gpu_utilization", "gpu_time_us", "cost_per_epoch", "fastest", "cheapest"}


def _run_folder(tmp_path: Path, workload: str = "input_bound") -> Path:
    folder = tmp_path / workload
    shutil.copytree(DATA / "gpu_h100" / workload, folder)
    return folder


def test_predict_a_run_folder_to_json(tmp_path: Path, capsys) -> None:
    folder = _run_folder(tmp_path)
    out = tmp_path / "p.json"
    assert main(["predict", str(folder), "--gpu", "h200,l4", "--price", "l4=0.8", "--batch-size", "32",
                 "--json", str(out), "--width", "200"]) == 0
    printed = capsys.readouterr().out
    assert "This job on other GPUs" in printed and "NVIDIA L4" in printed and "input bound" in printed
    doc = json.loads(out.read_text())
    p = doc["prediction"]
    assert set(p) == {"origin", "targets", "model", "sources", "warnings"}
    assert set(p["origin"]) == CONTRACT_ORIGIN | EXTRA_ORIGIN
    assert all(set(t) == CONTRACT_TARGET | EXTRA_TARGET for t in p["targets"])
    assert [t["gpu"] for t in p["targets"]] == ["h200", "l4"]
    # energy from the run folder's telemetry: 122.09 W over the window x the measured step
    assert p["origin"]["power_w"] == pytest.approx(122.09)
    assert p["origin"]["energy_j_per_step"] == pytest.approx(122.09 * p["origin"]["step_time_us"] / 1e6, rel=1e-3)
    l4 = p["targets"][1]
    assert l4["price_per_gpu_hour"] == 0.8 and "price: your --price" in l4["assumptions"]
    assert l4["samples_per_s"] == pytest.approx(32 / (l4["step_time_us"] / 1e6), rel=1e-3)
    assert l4["low_us"] < l4["step_time_us"] < l4["high_us"]


def test_predict_a_report_json_reads_its_trace(tmp_path: Path, capsys) -> None:
    folder = _run_folder(tmp_path, "copy_bound")
    report = folder / "report.json"
    assert main(["analyze", str(folder / "trace.json.gz"), "--json", str(report), "-q"]) == 0
    assert main(["predict", str(report), "--gpu", "h200", "--json", "-", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["prediction"]["targets"][0]["bottleneck"] == "copy_bound"
    (folder / "trace.json.gz").unlink()
    moved = tmp_path / "elsewhere.json"
    report.rename(moved)
    assert main(["predict", str(moved), "--gpu", "h200"]) == 2
    assert "the trace this report was made from is not there" in capsys.readouterr().err


def test_analyze_with_predict_adds_the_section_and_report_renders_it_again(tmp_path: Path, capsys) -> None:
    trace = DATA / "gpu_h100" / "launch_bound" / "trace.json.gz"
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    assert main(["analyze", str(trace), "--predict", "h200", "--json", str(out), "--html", str(html),
                 "--width", "200"]) == 0
    assert "This job on other GPUs (predicted)" in capsys.readouterr().out
    assert json.loads(out.read_text())["prediction"]["targets"][0]["gpu"] == "h200"
    page = html.read_text()
    assert 'id="prediction"' in page and 'id="fig-prediction"' in page and "fig-prediction" in page
    assert main(["report", str(out), "--width", "200"]) == 0
    assert "NVIDIA H200" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--gpu", "h900"], "unknown target GPU 'h900'"),
    (["--gpu", ""], "name at least one GPU"),
    (["--gpu", "h200", "--price", "h200"], "expected GPU=USD_PER_GPU_HOUR"),
    (["--gpu", "h200", "--origin", "nope"], "unknown origin GPU 'nope'"),
])
def test_bad_options_are_one_line_errors(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    assert main(["predict", str(DATA / "gpu_h100" / "input_bound" / "trace.json.gz"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_gpu_the_table_does_not_spell_is_taken_by_its_family_and_sm_count(capsys) -> None:
    """NVIDIA A100-PG509-200 (the A100 SXM4 40GB board, 108 SMs) is no row's name: the A100 row with its SM count is
    taken, and the prediction says so (naming --origin to say otherwise)."""
    path = kineto_trace("a100_convnet_ddp_rank0.json.gz")
    assert main(["predict", str(path), "--gpu", "h100", "--json", "-", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    said = " ".join([*doc["notes"], *json.dumps(doc["prediction"]).split("\\n")])
    assert "'NVIDIA A100-PG509-200' is not in the hardware table" in said and "108 SMs" in said and "--origin" in said
    assert main(["predict", str(path), "--gpu", "h100", "--origin", "a100-sxm-40gb", "-q"]) == 0


def test_a_cpu_only_trace_has_nothing_to_predict(tmp_path: Path, capsys) -> None:
    b = cpu_bound_trace()
    b.events = [e for e in b.events if e["cat"] not in ("kernel", "cuda_runtime")]
    path = b.write(tmp_path / "cpu.json")
    assert main(["predict", str(path), "--gpu", "h100"]) == 2
    assert "no GPU activity" in capsys.readouterr().err
    # analyze goes on, and says why there is no prediction
    assert main(["analyze", str(path), "--predict", "h100", "--json", str(tmp_path / "r.json"), "-q"]) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["prediction"] is None and any(n.startswith("no prediction: ") for n in doc["notes"])


def test_the_verb_is_registered_and_says_what_it_does() -> None:
    done = subprocess.run([sys.executable, "-m", "stepscope", "predict", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "--gpu" in done.stdout and "--samples-per-epoch" in done.stdout


def test_run_with_predict_on_a_cpu_keeps_its_files_and_says_why_there_is_no_prediction(tmp_path: Path,
                                                                                       capfd) -> None:
    torch = pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text("import torch\nm = torch.nn.Linear(8, 2)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                      "for _ in range(12):\n    m(torch.randn(4, 8)).sum().backward()\n    opt.step()\n")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = main(["run", "--out", str(tmp_path / "out"), "--skip", "10", "--predict", "h100", str(script)])
    finally:
        torch.set_num_threads(before)
    assert code == 0, capfd.readouterr().err
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert doc["prediction"] is None
    assert any(n.startswith("no prediction: ") and "no GPU activity" in n for n in doc["notes"])


def test_a_live_runs_power_comes_from_its_telemetry_window() -> None:
    """What `run --predict` hands the prediction: the window's mean power of the first GPU."""
    from stepscope.model.telemetry import GpuWindow, WindowSummary
    from stepscope.predict.energy import window_power

    window = WindowSummary(start_s=1.0, end_s=1.2, samples=2, cpu_util_mean=None, cpu_util_per_core=None,
                           gpu=[GpuWindow(index=0, name="NVIDIA H100 80GB HBM3", util_mean=90.0, mem_util_mean=None,
                                          mem_used_max_bytes=None, power_mean_w=412.5, sm_clock_mean_mhz=None,
                                          energy_j=3.0)])
    assert window_power(window) == 412.5


def test_the_fastest_target_is_compared_with_the_origin(capsys) -> None:
    """The H100's fp32 matmuls moved to an A100 (19.5 against 67 dense fp32 TFLOP/s in the hardware table's
    datasheets): the only target is the fastest of the targets and still slower than the origin, and has no
    price (none given, and the table has none for it at this batch size), so none is cheapest."""
    trace = DATA / "gpu_h100" / "gpu_compute_bound" / "trace.json.gz"
    assert main(["predict", str(trace), "--gpu", "a100", "--width", "200"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("fastest of the targets: "))
    assert line.startswith("fastest of the targets: a100-sxm-80gb (slower than the origin, h100-sxm, at ")
    assert line.endswith("; cheapest: - (no price or no batch size for any target)")


def test_analyze_and_run_take_origin_like_predict(capsys) -> None:
    """`--origin` names the GPU a trace was recorded on for analyze's (and run's) --predict, as for predict; without
    --predict there is nothing for it to do, and saying so beats ignoring it."""
    path = kineto_trace("a100_convnet_ddp_rank0.json.gz")
    assert main(["analyze", str(path), "--predict", "h100", "--origin", "a100-sxm-80gb", "--json", "-", "-q"]) == 0
    origin = json.loads(capsys.readouterr().out)["prediction"]["origin"]
    assert origin["gpu"] == "a100-sxm-80gb" and origin["name"] == "NVIDIA A100-PG509-200"
    assert main(["analyze", str(path), "--origin", "a100-sxm-80gb", "-q"]) == 2
    assert "--origin need --predict GPUS" in capsys.readouterr().err
    assert main(["analyze", str(path), "--predict", "h100", "--origin", "nope", "-q"]) == 2
    assert "unknown origin GPU 'nope'" in capsys.readouterr().err

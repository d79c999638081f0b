"""Fixes in the user's own framework: under the Hugging Face Trainer, Lightning or accelerate, each fix names that
framework's setting at the line where the user sets it (TrainingArguments( / Trainer( / Accelerator(, or the user's
own DataLoader( call), not plain-PyTorch code at `trainer.train()`. Real runs of small scripts (no download), and
every fix the table covers on a recommendation as the rules title it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import framework_scripts as scripts
from stepscope.advice.recommendation import in_framework
from stepscope.frameworks import FRAMEWORKS
from stepscope.frameworks.detect import detect, first_call
from stepscope.model import report as s
from stepscope.model.run import FrameworkSettings

pytest.importorskip("torch")


def stepscope_run(tmp_path: Path, source: str) -> dict:
    script = tmp_path / "train.py"
    script.write_text(source)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-m", "stepscope", "run", "-o", str(tmp_path / "run"), "--warmup", "1",
                           "--steps", "3", "--no-timing-pass", "--telemetry-interval", "0", str(script)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp_path / "run" / "report.json").read_text())


def _line(rec: dict) -> int | None:
    return rec["location"]["line"] if rec["location"] else None


def test_a_trainer_scripts_fixes_are_trainingarguments_fields_at_their_line(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    report = stepscope_run(tmp_path, scripts.HF_TRAINER)
    fw = report["run"]["settings"]["framework"]
    assert (fw["name"], fw["config_name"]) == ("huggingface", "TrainingArguments")
    assert fw["config"]["line"] == scripts.HF_ARGS_LINE and fw["call"]["line"] == scripts.HF_TRAIN_LINE
    recs = {r["id"]: r for r in report["recommendations"]}
    # The step waits ~8 ms a batch on data loaded in the main process: workers are the fix, where the user sets them.
    workers = recs["dataloader_workers"]
    assert "TrainingArguments(dataloader_num_workers=" in workers["title"] and "DataLoader(" not in workers["title"]
    assert _line(workers) == scripts.HF_ARGS_LINE and workers["location"]["file"] == "train.py"
    for rec in report["recommendations"]:  # every fix the Trainer has a field for is that field, at that line
        if rec["id"] in FRAMEWORKS["huggingface"].keywords or rec["id"] == "cpu_bf16":
            assert "TrainingArguments(" in rec["title"] and _line(rec) == scripts.HF_ARGS_LINE, rec
        assert _line(rec) != scripts.HF_TRAIN_LINE, rec  # never `trainer.train()`


def test_a_lightning_scripts_loader_fix_is_in_its_datamodule_and_compile_before_fit(tmp_path: Path) -> None:
    pytest.importorskip("lightning.pytorch")
    report = stepscope_run(tmp_path, scripts.LIGHTNING)
    fw = report["run"]["settings"]["framework"]
    assert (fw["name"], fw["config"]["line"], fw["call"]["line"]) == (
        "lightning", scripts.LIGHTNING_TRAINER_LINE, scripts.LIGHTNING_FIT_LINE)
    recs = {r["id"]: r for r in report["recommendations"]}
    workers = recs["dataloader_workers"]
    assert "DataLoader(..., num_workers=" in workers["title"] and "train_dataloader()" in workers["title"]
    assert _line(workers) == scripts.LIGHTNING_LOADER_LINE
    assert workers["location"]["function"] == "Data.train_dataloader"
    for rec in report["recommendations"]:
        if rec["id"] == "torch_compile":
            assert "before trainer.fit" in rec["title"] and _line(rec) == scripts.LIGHTNING_FIT_LINE
        if rec["id"] in ("amp", "cpu_bf16"):
            assert 'Trainer(precision="bf16-mixed")' in rec["title"] and _line(rec) == scripts.LIGHTNING_TRAINER_LINE


def test_an_accelerate_scripts_loader_fix_is_at_its_own_dataloader_not_prepare(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    report = stepscope_run(tmp_path, scripts.ACCELERATE)
    fw = report["run"]["settings"]["framework"]
    assert (fw["name"], fw["config"]["line"], fw["loader"]["line"]) == (
        "accelerate", scripts.ACCELERATOR_LINE, scripts.ACCELERATE_LOADER_LINE)
    # The loader the loop steps is accelerate's copy, built at prepare(): the fix goes on the user's DataLoader(.
    assert report["run"]["settings"]["dataloader"]["location"]["line"] == scripts.ACCELERATE_PREPARE_LINE
    workers = next(r for r in report["recommendations"] if r["id"] == "dataloader_workers")
    assert _line(workers) == scripts.ACCELERATE_LOADER_LINE and "DataLoader(..., num_workers=" in workers["title"]


# -- every fix of the table, on recommendations titled as the rules title them ------------------------------------

TITLES = {  # advice/rules/ and advice/meter.py, verbatim in their form
    "dataloader_workers": ("Load batches in worker processes: DataLoader(..., num_workers=2, pin_memory=True)",
                           {"suggested_workers": 2}),
    "persistent_workers": ("Keep DataLoader workers alive between epochs: DataLoader(..., persistent_workers=True)",
                           {}),
    "pin_memory": ("Pin host memory for the 1.0 MB per step copied to the GPU: DataLoader(..., pin_memory=True)", {}),
    "amp": ("Train in mixed precision: 60% of kernel time is fp32 matmuls and convolutions with no half-precision "
            "tensor-core use: torch.autocast('cuda', dtype=torch.bfloat16)", {}),
    "cpu_bf16": ("Compute in bf16 on this CPU (amx_bf16): with torch.autocast('cpu', dtype=torch.bfloat16): around "
                 "the forward (40% of the step is matmuls and convolutions)", {}),
    "torch_compile": ("Compile the model: model = torch.compile(model)", {}),
    "larger_batch": ("Use a bigger batch (2x shown) to spread the per-step host overhead over more samples; rescale "
                     "the learning rate", {"batch_factor": 2}),
    "cuda_graphs": ("Capture the step in a CUDA graph (torch.compile(model, mode='reduce-overhead')) if its shapes "
                    "are static", {}),
    "tf32": ("Allow TF32 for fp32 matmuls (Ampere or newer): torch.backends.cuda.matmul.allow_tf32 = True "
             "or torch.set_float32_matmul_precision('high')", {}),
    "fused_optimizer": ("Use a fused optimizer (40 small optimizer kernels per step): e.g. torch.optim.AdamW(..., "
                        "fused=True) or foreach=True", {}),
}


def _settings(name: str, config: int, call: int, loader: int | None = None) -> s.Settings:
    def at(line: int) -> s.Location:
        return s.Location(file="train.py", line=line, function="<module>", code="...")

    return s.Settings(dataloader=s.LoaderSettings(num_workers=0, pin_memory=False, persistent_workers=False,
                                                  batch_size=4, location=at(call)),
                      framework=FrameworkSettings(name=name, config_name=FRAMEWORKS[name].config[0],
                                                    config=at(config), call=at(call),
                                                    loader=at(loader) if loader else None))


def _rec(rec_id: str, line: int) -> s.Recommendation:
    title, evidence = TITLES[rec_id]
    return s.Recommendation(id=rec_id, title=title, evidence=evidence, estimated_speedup=1.5,
                            location=s.Location(file="train.py", line=line, function="<module>", code="..."))


HF_SETTINGS = {  # what the user writes in TrainingArguments(...) for each fix
    "dataloader_workers": "TrainingArguments(dataloader_num_workers=2)",
    "persistent_workers": "TrainingArguments(dataloader_persistent_workers=True)",
    "pin_memory": "TrainingArguments(dataloader_pin_memory=True)",
    "amp": "TrainingArguments(bf16=True)",
    "cpu_bf16": "TrainingArguments(bf16=True)",
    "torch_compile": "TrainingArguments(torch_compile=True)",
    "larger_batch": "TrainingArguments(per_device_train_batch_size=8)",  # 2 x the 4 it has
    "fused_optimizer": 'TrainingArguments(optim="adamw_torch_fused")',
    "cuda_graphs": 'TrainingArguments(torch_compile=True, torch_compile_mode="reduce-overhead")',
    "tf32": "TrainingArguments(tf32=True)",
}


@pytest.mark.parametrize("rec_id", sorted(HF_SETTINGS))
def test_every_trainer_fix_is_its_trainingarguments_field(rec_id: str) -> None:
    rec = in_framework(_rec(rec_id, 31), _settings("huggingface", 25, 31))
    assert HF_SETTINGS[rec_id] in rec.title
    assert not any(code in rec.title for code in ("DataLoader(", "torch.autocast", "torch.compile(", "AdamW(",
                                                  "torch.backends", "set_float32_matmul_precision"))
    assert rec.location is not None and rec.location.line == 25
    assert rec.evidence["framework_setting"] == HF_SETTINGS[rec_id]


def test_half_precision_is_each_frameworks_own_precision_setting() -> None:
    fp16 = _rec("amp", 9)
    fp16 = s.Recommendation(**{**{f: getattr(fp16, f) for f in fp16.__struct_fields__},
                               "title": fp16.title.replace("bfloat16", "float16")})
    expected = {"huggingface": ("TrainingArguments(bf16=True)", "TrainingArguments(fp16=True)"),
                "lightning": ('Trainer(precision="bf16-mixed")', 'Trainer(precision="16-mixed")'),
                "accelerate": ('Accelerator(mixed_precision="bf16")', 'Accelerator(mixed_precision="fp16")')}
    for name, (bf16, half) in expected.items():
        settings = _settings(name, 12, 30)
        for rec, text in ((_rec("amp", 9), bf16), (fp16, half), (_rec("cpu_bf16", 9), bf16)):
            done = in_framework(rec, settings)
            assert text in done.title and done.location is not None and done.location.line == 12, (name, done)


def test_lightning_and_accelerate_keep_loader_fixes_on_the_users_dataloader() -> None:
    lightning = in_framework(_rec("persistent_workers", 18), _settings("lightning", 34, 36))
    assert lightning.title == TITLES["persistent_workers"][0] and lightning.location.line == 18
    compiled = in_framework(_rec("torch_compile", 18), _settings("lightning", 34, 36))
    assert "torch.compile(model) before trainer.fit" in compiled.title and compiled.location.line == 36
    accelerate = in_framework(_rec("dataloader_workers", 20), _settings("accelerate", 16, 25, loader=19))
    assert "DataLoader(..., num_workers=2" in accelerate.title and accelerate.location.line == 19
    accelerated = in_framework(_rec("torch_compile", 20), _settings("accelerate", 16, 25, loader=19))
    assert 'Accelerator(dynamo_backend="inductor")' in accelerated.title and accelerated.location.line == 16


def test_a_plain_loop_keeps_its_plain_fix() -> None:
    assert detect(sys._getframe()) is None  # pytest's own frames are no training framework
    rec = _rec("dataloader_workers", 7)
    assert in_framework(rec, s.Settings(dataloader=None)) == rec


def test_the_configuration_call_is_found_in_the_source(tmp_path: Path) -> None:
    for source, names, line in ((scripts.HF_TRAINER, ("TrainingArguments",), scripts.HF_ARGS_LINE),
                                (scripts.LIGHTNING, ("Trainer",), scripts.LIGHTNING_TRAINER_LINE),
                                (scripts.ACCELERATE, ("Accelerator",), scripts.ACCELERATOR_LINE),
                                (scripts.LIGHTNING, ("DataLoader",), scripts.LIGHTNING_LOADER_LINE)):
        path = tmp_path / f"{names[0]}.py"
        path.write_text(source)
        site = first_call([str(tmp_path / "missing.py"), str(path)], names)
        assert site is not None and site.line == line, (names, site)

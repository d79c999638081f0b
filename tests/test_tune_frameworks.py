"""`stepscope tune` under a training framework: a trial makes the fixes through the framework's own configuration
(TrainingArguments' fields, Lightning Trainer's precision, the Accelerator's mixed_precision) as the program builds
it, and the patch sets the same keywords at the line of that call; the user's file is never written. Real trial
children on small scripts (tests/framework_scripts.py), nothing to download."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import framework_scripts as scripts
from stepscope.tune.suggest import suggest
from stepscope.tune.wire import ChildResult, FrameworkSite, TrialSpec, decode_result, encode

pytest.importorskip("torch")


def trial(tmp_path: Path, source: str, fixes: dict, framework: FrameworkSite | None) -> tuple[Path, ChildResult]:
    script = tmp_path / "train.py"
    script.write_text(source)
    spec = TrialSpec(target=str(script), args=[], fixes=fixes, warmup=2, steps=3, min_seconds=0.0,
                     result=str(tmp_path / "result.json"), framework=framework)
    (tmp_path / "spec.json").write_bytes(encode(spec))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-m", "stepscope.tune.child", str(tmp_path / "spec.json")],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = decode_result((tmp_path / "result.json").read_bytes())
    assert result.status == "measured", result.detail
    return script, result


def patch_lines(text: str | None) -> tuple[list[str], list[str]]:
    assert text is not None
    lines = text.splitlines()
    return ([x[1:] for x in lines if x.startswith("-") and not x.startswith("---")],
            [x[1:] for x in lines if x.startswith("+") and not x.startswith("+++")])


def test_a_trainer_trial_sets_trainingarguments_fields_and_the_patch_sets_them_at_its_line(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    fixes = {"dataloader_workers": {"num_workers": 2}, "amp": {"dtype": "bfloat16"}, "larger_batch": {"factor": 2}}
    site = FrameworkSite(name="huggingface", package="transformers", config_name="TrainingArguments")
    script, result = trial(tmp_path, scripts.HF_TRAINER, fixes, site)
    assert result.applied == {"dataloader_workers": 1, "amp": 1, "larger_batch": 1}  # one field each
    # The Trainer built its DataLoader from the fields it was given: 2 workers, 2 x 4 samples a batch.
    main = result.settings.loaders[0]
    assert (main.num_workers, main.batch_size) == (2, 8)
    fw = result.settings.framework
    assert fw is not None and fw.config is not None and fw.call is not None
    assert (fw.name, fw.config.line, fw.call.line) == ("huggingface", scripts.HF_ARGS_LINE, scripts.HF_TRAIN_LINE)
    text, unplaced, _ = suggest(fixes, list(fixes), result.settings, "cpu", [])
    removed, added = patch_lines(text)
    assert unplaced == [] and "DataLoader(" not in (text or "") and "autocast" not in (text or "")
    lines = scripts.HF_TRAINER.splitlines()
    assert removed == [lines[scripts.HF_ARGS_LINE], lines[scripts.HF_ARGS_LINE + 2]]  # lines 26 and 28
    assert "per_device_train_batch_size=8" in added[0] and "learning rate must follow" in added[0]
    assert added[1].strip() == "dataloader_num_workers=2, bf16=True,"
    assert script.read_text() == scripts.HF_TRAINER  # the user's file is never written


def test_a_lightning_trial_sets_the_trainers_precision_and_the_datamodules_loader(tmp_path: Path) -> None:
    pytest.importorskip("lightning.pytorch")
    fixes = {"dataloader_workers": {"num_workers": 2}, "amp": {"dtype": "bfloat16"}}
    site = FrameworkSite(name="lightning", package="lightning", config_name="Trainer")
    script, result = trial(tmp_path, scripts.LIGHTNING, fixes, site)
    assert result.applied == {"dataloader_workers": 1, "amp": 1}
    # Lightning's own bf16-mixed precision runs the forward under autocast: the model saw it at its first forward.
    assert result.settings.model is not None and result.settings.model.autocast
    fw = result.settings.framework
    assert fw is not None and fw.config is not None and fw.config.line == scripts.LIGHTNING_TRAINER_LINE
    assert result.settings.loaders[0].line == scripts.LIGHTNING_LOADER_LINE
    text, unplaced, _ = suggest(fixes, list(fixes), result.settings, "cpu", [])
    removed, added = patch_lines(text)
    lines = scripts.LIGHTNING.splitlines()
    assert unplaced == [] and "autocast" not in (text or "")
    assert removed == [lines[scripts.LIGHTNING_LOADER_LINE - 1], lines[scripts.LIGHTNING_TRAINER_LINE]]
    assert added[0].strip() == "return DataLoader(Slow(), batch_size=4, num_workers=2)"
    assert added[1].rstrip().endswith('enable_model_summary=False, precision="bf16-mixed")')
    assert script.read_text() == scripts.LIGHTNING


def test_an_accelerate_baseline_finds_the_accelerator_and_the_users_dataloader(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    _, result = trial(tmp_path, scripts.ACCELERATE, {}, None)  # the baseline: no fixes, told nothing
    fw = result.settings.framework
    assert fw is not None and fw.config is not None and fw.loader is not None
    assert (fw.name, fw.config.line, fw.loader.line) == (
        "accelerate", scripts.ACCELERATOR_LINE, scripts.ACCELERATE_LOADER_LINE)
    fixes = {"dataloader_workers": {"num_workers": 2}, "amp": {"dtype": "bfloat16"}}
    text, unplaced, _ = suggest(fixes, list(fixes), result.settings, "cpu", [])
    removed, added = patch_lines(text)
    lines = scripts.ACCELERATE.splitlines()
    assert unplaced == [] and "autocast" not in (text or "")
    assert removed == [lines[scripts.ACCELERATOR_LINE - 1], lines[scripts.ACCELERATE_LOADER_LINE - 1]]
    assert added == ['accelerator = Accelerator(cpu=True, mixed_precision="bf16")',
                     "loader = DataLoader(Slow(), batch_size=4, num_workers=2)"]

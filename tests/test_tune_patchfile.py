"""The kept fixes as a unified diff: placed at the sites the trials recorded, applicable with `patch -p1`, and the
user's file untouched."""

from __future__ import annotations

import ast
import hashlib
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from stepscope.tune.suggest import suggest
from stepscope.tune.wire import CallSite, LoaderSite, ModelInfo, OptimizerSite, Settings

SCRIPT = textwrap.dedent('''\
    import torch
    from torch.utils.data import DataLoader

    def main(args):
        loader = DataLoader(
            dataset,
            batch_size=args.batch_size,
            num_workers=args.workers,
            pin_memory=False,  # a comment stays
        )
        model: torch.nn.Module = ResNet(depth=18).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            loss = criterion(model(x.to(device)), y.to(device))
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
    ''')


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def sites(path: Path) -> Settings:
    f = str(path)
    return Settings(
        loaders=[LoaderSite(file=f, line=line_of(SCRIPT, "DataLoader("), num_workers=0, pin_memory=False,
                            persistent_workers=False, batch_size=32, batches=10)],
        optimizers=[OptimizerSite(file=f, line=line_of(SCRIPT, "optim.SGD"), cls="SGD", foreach=None, fused=None,
                                  supports_fused=True)],
        zero_grad=[CallSite(file=f, line=line_of(SCRIPT, "zero_grad"), value=False)],
        copies=[CallSite(file=f, line=line_of(SCRIPT, "x.to(device)"), value="to")],
        model=ModelInfo(cls="ResNet", module="__main__", parameters=1, dtype="float32", device="cuda:0", conv=True,
                        linear=True, compiled=False, autocast=False, channels_last=False),
        model_site=CallSite(file=f, line=line_of(SCRIPT, "loss = criterion")))


def keywords(tree: ast.AST, name: str) -> dict[str, str]:
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call)
                and getattr(n.func, "attr", getattr(n.func, "id", None)) == name)
    return {k.arg: ast.unparse(k.value) for k in call.keywords if k.arg}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "train.py").write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def apply(patch: str, project: Path, tmp_path: Path) -> str:
    """Apply with GNU patch to a copy of the project; return the patched script."""
    copy = tmp_path / "copy"
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns("copy"))
    done = subprocess.run(["patch", "-p1", "--batch"], input=patch, text=True, cwd=copy, capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return (copy / "train.py").read_text()


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_every_placeable_fix_lands_on_its_line(project: Path, tmp_path: Path) -> None:
    script = project / "train.py"
    before = hashlib.sha256(script.read_bytes()).hexdigest()
    applied = ["dataloader_workers", "pin_memory", "persistent_workers", "non_blocking_copy", "set_to_none",
               "fused_optimizer", "amp", "channels_last", "torch_compile", "tf32"]
    params = {"dataloader_workers": {"num_workers": 4}, "fused_optimizer": {"mode": "fused"},
              "amp": {"dtype": "bfloat16"}}
    text, unplaced, _ = suggest(params, applied, sites(script), "cuda", ["kept everything"])
    assert unplaced == [] and text is not None
    assert text.startswith("# kept everything\n# apply in ") and "`git apply " in text and "--- a/train.py" in text
    assert hashlib.sha256(script.read_bytes()).hexdigest() == before  # the user's file is not touched
    patched = apply(text, project, tmp_path)
    tree = ast.parse(patched)
    assert keywords(tree, "DataLoader") == {"batch_size": "args.batch_size", "num_workers": "4",
                                            "pin_memory": "True", "persistent_workers": "True"}
    assert "# a comment stays" in patched
    assert keywords(tree, "SGD") == {"lr": "0.1", "fused": "True"}
    assert keywords(tree, "zero_grad") == {"set_to_none": "True"}
    tos = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "to"
           and any(k.arg == "non_blocking" for k in n.keywords)]
    assert len(tos) == 2  # both batch copies on that line
    with_node = next(n for n in ast.walk(tree) if isinstance(n, ast.With))
    assert ast.unparse(with_node.items[0].context_expr) == "torch.autocast('cuda', dtype=torch.bfloat16)"
    assert ast.unparse(with_node.body[0]).startswith("loss = criterion(model(")
    lines = patched.splitlines()
    built = line_of(patched, "model: torch.nn.Module")
    assert lines[built].strip().startswith("model = model.to(memory_format=torch.channels_last)")
    assert lines[built + 1].strip().startswith("model.compile()")
    assert lines[2] == "torch.backends.cuda.matmul.allow_tf32 = True  # stepscope tune: tf32"


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_cuda_graphs_is_one_compile_call_and_a_bigger_batch_scales_the_expression(project: Path,
                                                                                   tmp_path: Path) -> None:
    text, _, _ = suggest({"larger_batch": {"factor": 2}, "cuda_graphs": {"mode": "reduce-overhead"}},
                      ["torch_compile", "cuda_graphs", "larger_batch"], sites(project / "train.py"), "cuda", [])
    assert text is not None
    patched = apply(text, project, tmp_path)
    assert keywords(ast.parse(patched), "DataLoader")["batch_size"] == "2 * args.batch_size"
    line = next(x for x in patched.splitlines() if "batch_size=" in x)
    assert line.endswith("# stepscope tune: larger_batch; the learning rate must follow the batch (x2: linear "
                         "scaling, with a warm-up)")
    assert patched.count(".compile(") == 1 and 'model.compile(mode="reduce-overhead")' in patched


def test_a_fix_with_no_site_in_the_files_is_said_not_placed(project: Path) -> None:
    empty = Settings(model_site=CallSite(file=str(project / "missing.py"), line=3))
    text, unplaced, commands = suggest({}, ["set_to_none", "amp"], empty, "cpu", [])
    assert text is None and unplaced == ["set_to_none", "amp"] and commands == []


@pytest.mark.parametrize("layout", ["script in the working folder", "script outside it",
                                    "working folder inside a git repository"])
def test_each_printed_command_applies_the_patch(layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands in the header (and in the Tune) are run as printed, in the folder the tune ran in, and each
    alone turns set_to_none=False into True in the user's file, whatever the script's place."""
    cwd = tmp_path / "runs" / "here"
    script_dir = tmp_path / "elsewhere" / "code" if layout == "script outside it" else cwd / "src"
    script_dir.mkdir(parents=True)
    cwd.mkdir(parents=True, exist_ok=True)
    if layout.endswith("git repository") and shutil.which("git"):
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    script = script_dir / "train.py"
    script.write_text(SCRIPT)
    monkeypatch.chdir(cwd)
    patch_file = cwd / "tune out" / "suggested.patch"  # a space: the commands quote their paths
    text, unplaced, commands = suggest({}, ["set_to_none"], sites(script), "cpu", ["kept set_to_none"],
                                       str(patch_file))
    assert text is not None and unplaced == [] and len(commands) == 2
    assert str(tmp_path) not in "".join(line for line in text.splitlines() if line.startswith(("---", "+++")))
    header = text.splitlines()[1]
    assert all(c in header for c in commands) and str(cwd) in header
    patch_file.parent.mkdir()
    patch_file.write_text(text)
    expected = SCRIPT.replace("set_to_none=False", "set_to_none=True")
    ran = 0
    for command in commands:
        if shutil.which(command.split()[0]) is None:
            continue
        script.write_text(SCRIPT)
        done = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
        assert script.read_text() == expected, command
        ran += 1
    if ran == 0:
        pytest.skip("neither git nor patch is installed")


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_no_workers_in_the_patch_sets_what_dataloader_refuses_without_them(project: Path, tmp_path: Path) -> None:
    """num_workers=0 with persistent_workers, prefetch_factor or multiprocessing_context in the call raises
    ValueError: the patch sets each the call passes to its no-worker value, and adds none the call leaves out."""
    script = project / "train.py"
    script.write_text(SCRIPT.replace("num_workers=args.workers,", 'num_workers=args.workers, prefetch_factor=4, '
                                     'multiprocessing_context="fork",'))
    text, unplaced, _ = suggest({"dataloader_workers": {"num_workers": 0}}, ["dataloader_workers"], sites(script),
                                "cpu", [])
    assert unplaced == [] and text is not None
    given = keywords(ast.parse(apply(text, project, tmp_path)), "DataLoader")
    assert given == {"batch_size": "args.batch_size", "num_workers": "0", "prefetch_factor": "None",
                     "multiprocessing_context": "None", "pin_memory": "False"}
    torch = pytest.importorskip("torch")
    data = torch.utils.data.TensorDataset(torch.zeros(4, 2))
    torch.utils.data.DataLoader(data, batch_size=2, **{k: ast.literal_eval(v) for k, v in given.items()
                                                         if k != "batch_size"})  # accepted as patched

"""uint8_transfer on a torchvision-like transform chain (tests/standin: torchvision cannot be installed here): which
chains are recognised; in a trial, the workers send uint8 and the model is given the very numbers it was given
before (converted and normalised after the copy); and `suggested.patch` writes that as code whose model inputs
are the original script's, bit for bit."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset, Subset  # noqa: E402

from stepscope.tune.child import install, run_trial  # noqa: E402
from stepscope.tune.points import Points  # noqa: E402
from stepscope.tune.points.uint8 import find  # noqa: E402
from stepscope.tune.suggest import suggest  # noqa: E402
from stepscope.tune.wire import TrialSpec  # noqa: E402

STANDIN = Path(__file__).parent / "standin"
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)

SCRIPT = textwrap.dedent('''\
    import numpy as np
    import torch
    import torchvision.transforms as T
    from torch.utils.data import DataLoader, Dataset

    MEAN = (0.4914, 0.4822, 0.4465)
    STD = (0.2470, 0.2435, 0.2616)


    class Images(Dataset):
        def __init__(self, transform):
            self.data = np.random.default_rng(0).integers(0, 256, (512, 12, 12, 3), dtype=np.uint8)
            self.transform = transform

        def __len__(self):
            return len(self.data)

        def __getitem__(self, i):
            return self.transform(self.data[i]), i % 10


    def main():
        device = torch.device("cpu")
        torch.manual_seed(0)
        transform = T.Compose([T.Resize(8), T.ToTensor(), T.Normalize(MEAN, STD)])
        loader = DataLoader(Images(transform), batch_size=16, num_workers=2)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(144, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step, (inputs, labels) in enumerate(loader):
            inputs = inputs.to(device)
            labels = labels.to(device)
            print("batch", step, inputs.dtype, tuple(inputs.shape), repr(float(inputs.double().sum())))
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()


    main()
''')


@pytest.fixture
def tv(monkeypatch: pytest.MonkeyPatch):
    """The stand-in torchvision, importable while the test runs."""
    monkeypatch.syspath_prepend(str(STANDIN))
    import torchvision.transforms as T

    yield T
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]


class Images(Dataset):
    def __init__(self, transform, n: int = 32) -> None:
        self.data = np.random.default_rng(0).integers(0, 256, (n, 12, 12, 3), dtype=np.uint8)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        return self.transform(self.data[i]), i % 10


class Preset:
    """As torchvision's reference scripts hold their chain: an object whose `transforms` is a Compose."""

    def __init__(self, transforms) -> None:
        self.transforms = transforms

    def __call__(self, img):
        return self.transforms(img)


def test_the_chains_it_recognises_and_those_it_leaves(tv) -> None:
    T = tv
    found = find(Images(T.Compose([T.Resize(8), T.ToTensor(), T.Normalize(MEAN, STD)])))
    assert found is not None and found.to_uint8 and found.ending == "ToTensor+Normalize"
    assert found.mean == MEAN and found.std == STD and [type(t).__name__ for t in found.prefix] == ["Resize"]
    plain = find(Images(T.Compose([T.Resize(8), T.ToTensor()])))
    assert plain is not None and plain.ending == "ToTensor" and plain.mean is None
    # torchvision's reference script: PILToTensor, ConvertImageDtype(float), Normalize, inside a preset object.
    data = Subset(Images(Preset(T.Compose([T.PILToTensor(), T.ConvertImageDtype(torch.float),
                                           T.Normalize(MEAN, STD)]))), range(8))
    ref = find(data)
    assert ref is not None and not ref.to_uint8 and ref.attr == "transforms" and isinstance(ref.owner, Preset)
    assert ref.ending == "ConvertImageDtype+Normalize" and [type(t).__name__ for t in ref.prefix] == ["PILToTensor"]
    # Left alone: something after the normalisation, a half-precision conversion, a Compose that is not
    # torchvision's, no transform.
    class Compose(T.Compose):
        pass

    Compose.__module__ = "myproject.transforms"
    assert find(Images(T.Compose([T.ToTensor(), T.Normalize(MEAN, STD), T.Resize(4)]))) is None
    assert find(Images(T.Compose([T.PILToTensor(), T.ConvertImageDtype(torch.float16)]))) is None
    assert find(Images(Compose([T.ToTensor()]))) is None and find(Images(None)) is None


@pytest.mark.parametrize("chain", ["ToTensor", "PILToTensor"])
def test_in_a_trial_workers_send_uint8_and_the_model_sees_the_same_numbers(chain: str, tv) -> None:
    T = tv
    if chain == "ToTensor":
        transform = T.Compose([T.Resize(8), T.ToTensor(), T.Normalize(MEAN, STD)])
    else:
        transform = T.Compose([T.Resize(8), T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD)])
    dataset = Images(transform)
    expected = [x for x, _ in DataLoader(dataset, batch_size=8, num_workers=2, multiprocessing_context="fork")]
    seen = []

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(1))

        def forward(self, x):
            seen.append(x)
            return x.sum() * self.w

    points = install({"uint8_transfer": {}}, Points(lambda: 0))
    try:
        loader = DataLoader(dataset, batch_size=8, num_workers=2, multiprocessing_context="fork")
        assert dataset.transform is not transform  # cut before its float conversion, for the workers
        model = Probe()
        sent, copied = [], []
        for i, (x, _) in enumerate(loader):
            sent.append(x)
            copied.append(x.to("cpu") if i % 2 == 0 else x.to("cpu", torch.float64))
            model(x)  # never copied: converted where the model is called
    finally:
        points.undo()
    assert dataset.transform is transform
    assert all(x.dtype == torch.uint8 for x in sent)  # a quarter of the bytes to collate, pin and copy
    for i, (want, got, fed) in enumerate(zip(expected, copied, seen, strict=True)):
        assert got.dtype == (torch.float32 if i % 2 == 0 else torch.float64)
        assert torch.equal(got, want.to(got.dtype)) and torch.equal(fed, want)  # the same numbers, bit for bit
    assert points.applied["uint8_transfer"] == 1 and points.settings.transforms[0].ending == (
        "ToTensor+Normalize" if chain == "ToTensor" else "ConvertImageDtype+Normalize")
    assert points.settings.batch_copies and points.settings.batch_copies[0].file == __file__


def test_under_a_mode_of_the_programs_own_a_batch_is_converted_once(tv) -> None:
    """A TorchFunctionMode (a library's, or a profiler's left on the stack) hands `Tensor.to` back to the patched
    method from its handler: the patch must run once, not convert the already normalised batch again."""
    from torch.overrides import TorchFunctionMode

    class PassThrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    T = tv
    dataset = Images(T.Compose([T.Resize(8), T.ToTensor(), T.Normalize(MEAN, STD)]))
    expected = [x for x, _ in DataLoader(dataset, batch_size=8, num_workers=2, multiprocessing_context="fork")]
    points = install({"uint8_transfer": {}}, Points(lambda: 0))
    try:
        with PassThrough():
            copied = [x.to("cpu") for x, _ in DataLoader(dataset, batch_size=8, num_workers=2,
                                                           multiprocessing_context="fork")]
    finally:
        points.undo()
    assert len(copied) == len(expected) == 4
    assert all(torch.equal(got, want) for got, want in zip(copied, expected, strict=True))


FUNCTIONAL = {
    "compose": ("", "    transform = T.Compose([T.Resize(8), T.ToTensor(), T.Normalize(MEAN, STD)])\n"),
    "functional": ("import torchvision.transforms.functional as F\n\n\ndef transform(img):\n"
                   "    return F.normalize(F.to_tensor(F.resize(img, 8)), MEAN, STD)\n", ""),
    "functional, through a name": ("from torchvision.transforms.functional import normalize, resize, to_tensor\n\n\n"
                                   "def transform(img):\n    tensor = to_tensor(resize(img, 8))\n"
                                   "    return normalize(tensor, mean=MEAN, std=STD)\n", ""),
}
PATCHED = {
    "compose": ["    transform = T.Compose([T.Resize(8), T.PILToTensor()])",
                "        inputs = T.Normalize(MEAN, STD)(inputs.float().div(255))  # stepscope tune: uint8_transfer"],
    "functional": [
        "    return F.pil_to_tensor(F.resize(img, 8))",
        "        inputs = F.normalize(inputs.float().div(255), MEAN, STD)  # stepscope tune: uint8_transfer"],
    "functional, through a name": [
        "from torchvision.transforms.functional import pil_to_tensor  # stepscope tune: uint8_transfer",
        "    tensor = pil_to_tensor(resize(img, 8))", "    return tensor",
        "        inputs = normalize(inputs.float().div(255), mean=MEAN, std=STD)  # stepscope tune: uint8_transfer"],
}


def script_for(form: str) -> str:
    """SCRIPT with its transform written as a Compose, or as a function of torchvision's functional calls."""
    defined, built = FUNCTIONAL[form]
    text = SCRIPT.replace("    transform = T.Compose([T.Resize(8), T.ToTensor(), T.Normalize(MEAN, STD)])\n", built)
    return text.replace("\n\nclass Images", "\n\n" + defined + "\n\nclass Images") if defined else text


def test_transform_functions_it_recognises_and_those_it_leaves(tv, tmp_path: Path) -> None:
    import importlib.util

    path = tmp_path / "transforms_of_mine.py"
    path.write_text(textwrap.dedent("""
        import torchvision.transforms.functional as F

        MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


        def one_expression(img):
            return F.normalize(F.to_tensor(img), MEAN, STD)


        def through_a_name(img):
            t = F.to_tensor(img)
            return F.normalize(t, MEAN, STD)


        def only_to_tensor(img):
            return F.to_tensor(img)


        def used_twice(img):
            t = F.to_tensor(img)
            return F.normalize(t, MEAN, STD) + t.mean()


        def computed_stats(img):
            return F.normalize(F.to_tensor(img), [m * 1.0 for m in MEAN], STD)


        def not_torchvisions(img):
            return normalize(to_tensor(img), MEAN, STD)


        def to_tensor(img):
            return img


        def normalize(img, mean, std):
            return img
    """))
    spec = importlib.util.spec_from_file_location("transforms_of_mine", path)
    assert spec is not None and spec.loader is not None
    mine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mine)
    found = {name: find(Images(getattr(mine, name))) for name in (
        "one_expression", "through_a_name", "only_to_tensor", "used_twice", "computed_stats", "not_torchvisions")}
    assert found["one_expression"] is not None and found["one_expression"].ending == "to_tensor+normalize"
    assert found["one_expression"].mean == MEAN and found["one_expression"].std == STD
    assert found["through_a_name"] is not None and found["through_a_name"].function is mine.through_a_name
    assert found["only_to_tensor"] is not None and found["only_to_tensor"].ending == "to_tensor"
    # Left alone: the float tensor used again, statistics computed, functions that are not torchvision's.
    assert found["used_twice"] is None and found["computed_stats"] is None and found["not_torchvisions"] is None
    # In a trial the function is rebuilt without its float work: uint8, CHW, the pixels as they were.
    from stepscope.tune.points.uint8_functional import rebuild

    image = np.random.default_rng(1).integers(0, 256, (4, 4, 3), dtype=np.uint8)
    for name in ("one_expression", "through_a_name", "only_to_tensor"):
        out = rebuild(getattr(mine, name))(image)
        assert out.dtype == torch.uint8 and torch.equal(out, torch.from_numpy(image).permute(2, 0, 1))


@pytest.mark.parametrize("form", list(FUNCTIONAL))
def test_the_patch_writes_it_as_code_the_model_given_the_same_inputs(form: str, tv, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "train.py"
    script.write_text(script_for(form))
    monkeypatch.chdir(tmp_path)
    # The trial, in this process as a child runs it: what it records is what the patch is written from, and the
    # losses are those of the program as it is.
    spec = dict(target=str(script), args=[], warmup=2, steps=2, min_seconds=0.0, windows=2)
    trial = run_trial(TrialSpec(**spec, fixes={"uint8_transfer": {}}))
    assert trial.status == "measured" and trial.applied == {"uint8_transfer": 1}
    if form == "compose":  # the losses of the program as it is, step by step (the inputs below are, for each form)
        plain = run_trial(TrialSpec(**spec))
        n = min(len(trial.losses), len(plain.losses))  # a run may time a window more than the other (warm-up)
        assert n >= 4 and trial.losses[:n] == plain.losses[:n]
    copy_line = next(i for i, line in enumerate(script.read_text().splitlines(), 1)
                     if "inputs = inputs.to(device)" in line)
    assert [(c.file, c.line) for c in trial.settings.batch_copies] == [(str(script), copy_line)]
    text, unplaced, _ = suggest({}, ["uint8_transfer"], trial.settings, "cpu", ["uint8"])
    assert text is not None and unplaced == []
    patched_dir = tmp_path / "patched"
    patched_dir.mkdir()
    shutil.copy(script, patched_dir / "train.py")
    done = subprocess.run(["patch", "-p1", "--batch"], input=text, text=True, cwd=patched_dir, capture_output=True)
    if shutil.which("patch") is None:
        pytest.skip("GNU patch is not installed")
    assert done.returncode == 0, done.stdout + done.stderr
    patched = (patched_dir / "train.py").read_text().splitlines()
    assert all(line in patched for line in PATCHED[form]), "\n".join(patched)
    # Run as the user would: the model's inputs, batch by batch, are the original script's (each form computes
    # the same transform, so the Compose script's run is the reference for all three).
    assert run_script(patched_dir / "train.py") == original_inputs(tmp_path)


ORIGINAL: list[str] = []


def run_script(path: Path) -> str:
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(STANDIN), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def original_inputs(tmp_path: Path) -> str:
    """What the model is given in the script as written (its Compose form), once for the three forms."""
    if not ORIGINAL:
        (tmp_path / "original.py").write_text(SCRIPT)
        ORIGINAL.append(run_script(tmp_path / "original.py"))
        assert ORIGINAL[0].count("torch.float32") == 32
    return ORIGINAL[0]

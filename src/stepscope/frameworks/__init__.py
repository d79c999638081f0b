"""The training frameworks whose own settings carry the fixes: the Hugging Face Trainer (`TrainingArguments`),
Lightning (`Trainer`) and accelerate (`Accelerator`).

Under a framework the user does not write `DataLoader(num_workers=...)` or `torch.autocast(...)`: they set a field of
the framework's configuration call, at the line where they build it. This table says which keyword of that call
carries each fix; the advice (a fix's text and line, advice/recommendation.py) and `stepscope tune` (the trial's
override and the patch, tune/framework.py) both read it, so they say and do the same thing. Which framework runs
the step, and where the user builds its configuration, is found by frameworks/detect.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Params = dict[str, Any]  # a fix's settings, as tune's fixes take them ({"num_workers": 4}, {"dtype": "bfloat16"})


@dataclass(frozen=True)
class Scaled:
    """A keyword whose value is its current one times `factor` (a batch size)."""

    factor: int
    default: int  # the framework's default, when the call does not pass it


Keywords = Callable[[Params], dict[str, Any]]


def _precision(key: str, bf16: str, fp16: str) -> Keywords:
    """`key=bf16` for bfloat16 autocast (the fix's dtype), else `key=fp16`."""
    return lambda p: {key: bf16 if p.get("dtype", "bfloat16") == "bfloat16" else fp16}


@dataclass(frozen=True)
class Framework:
    name: str  # the step source's name where the framework has one ("huggingface", "lightning"), else "accelerate"
    packages: tuple[str, ...]  # top-level packages whose frames on the stack mean this framework runs the step
    config: tuple[str, ...]  # the call(s) the user configures it with, by name
    modules: dict[str, str]  # package -> the module defining the configuration class (tune patches its constructor)
    keywords: dict[str, Keywords] = field(default_factory=dict)  # fix id -> the configuration call's keywords
    # fix id -> what to write instead of the plain-PyTorch code, at the line that calls into the framework
    at_call: dict[str, str] = field(default_factory=dict)
    loader_in_user_code: bool = True  # the DataLoader is the user's own call (not built inside the framework)


HUGGINGFACE = Framework(
    name="huggingface", packages=("transformers",),
    config=("TrainingArguments", "Seq2SeqTrainingArguments"), modules={"transformers": "transformers.training_args"},
    keywords={
        "dataloader_workers": lambda p: {"dataloader_num_workers": int(p.get("num_workers", 4))},
        "pin_memory": lambda p: {"dataloader_pin_memory": True},
        "persistent_workers": lambda p: {"dataloader_persistent_workers": True},
        "larger_batch": lambda p: {"per_device_train_batch_size": Scaled(int(p.get("factor", 2)), 8)},
        "amp": lambda p: {"bf16": True} if p.get("dtype", "bfloat16") == "bfloat16" else {"fp16": True},
        "torch_compile": lambda p: {"torch_compile": True},
        "cuda_graphs": lambda p: {"torch_compile": True, "torch_compile_mode": "reduce-overhead"},
        "tf32": lambda p: {"tf32": True},
        "fused_optimizer": lambda p: {"optim": "adamw_torch_fused"},
    },
    loader_in_user_code=False)

LIGHTNING = Framework(
    name="lightning", packages=("lightning", "pytorch_lightning"), config=("Trainer",),
    modules={"lightning": "lightning.pytorch.trainer.trainer",
             "pytorch_lightning": "pytorch_lightning.trainer.trainer"},
    keywords={"amp": _precision("precision", "bf16-mixed", "16-mixed")},
    at_call={"torch_compile": "model = torch.compile(model) before trainer.fit(model, ...)"})

ACCELERATE = Framework(
    name="accelerate", packages=("accelerate",), config=("Accelerator",),
    modules={"accelerate": "accelerate.accelerator"},
    keywords={"amp": _precision("mixed_precision", "bf16", "fp16"),
              "torch_compile": lambda p: {"dynamo_backend": "inductor"}})

# Precedence: the Trainer and Lightning run their loops through accelerate's wrappers too.
FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (HUGGINGFACE, LIGHTNING, ACCELERATE)}
# Recommendation ids a tune fix carries out under another name.
ALIASES = {"cpu_bf16": "amp"}
# The fixes that change the DataLoader's own arguments.
LOADER_FIXES = ("dataloader_workers", "pin_memory", "persistent_workers", "larger_batch")


def fix_id(rec_id: str) -> str:
    return ALIASES.get(rec_id, rec_id)


def keywords(framework: str, fix: str, params: Params) -> dict[str, Any] | None:
    """The configuration call's keywords that carry out `fix` under `framework`; None: the framework has none."""
    fw = FRAMEWORKS.get(framework)
    make = fw.keywords.get(fix_id(fix)) if fw is not None else None
    return make(params) if make is not None else None


def value_text(value: Any, current: int | None = None) -> str:
    """A keyword's value as the user writes it (strings in double quotes)."""
    if isinstance(value, Scaled):
        return str(value.factor * (current or value.default))
    return json.dumps(value) if isinstance(value, str) else repr(value)


def call_text(config: str, kw: dict[str, Any], current: int | None = None) -> str:
    """`TrainingArguments(dataloader_num_workers=2)`."""
    return f"{config}({', '.join(f'{k}={value_text(v, current)}' for k, v in kw.items())})"

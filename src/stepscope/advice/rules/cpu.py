"""Fixes for a training step that computes on the CPU: each only where the program's settings and the CPU
allow it (a live capture knows both; a trace alone is given none of these, rather than guesses).

- `cpu_threads`: torch uses fewer intra-op threads than the cores this process may run on.
- `channels_last`: convolutions in NCHW on a CPU whose kernels are AVX-512 (oneDNN's NHWC path pays there;
  measured on this project's AVX2 test machine, ResNet-18 ran slower in channels_last, so no advice there).
- `cpu_bf16`: matmuls and convolutions in fp32 on a CPU with native bf16 (AMX or AVX512-BF16), autocast off;
  estimated from the ops' sizes (advice/cpu_precision.py): the part of their time that is math at the CPU's peak
  gains, the casts autocast adds cost their bytes (small convolutions gain little and pay for the casts).
- `torch_compile` (from host.torch_compile): Python overhead, else the ops around the matmuls and convolutions.
Each rule that leaves its fix out on a CPU run says why (a `Considered`): the report lists them.
"""

from __future__ import annotations

import re

from stepscope.advice.context import Context
from stepscope.advice.cpu_precision import CAST_BYTES_PER_S, bf16_ops
from stepscope.advice.recommendation import MIN_GAIN, recommendation
from stepscope.advice.whatif import CAVEAT, FUSION_TIME_KEPT, Estimate, step_to, step_without
from stepscope.analysis.hostwork import op_self_time
from stepscope.model import report as s
from stepscope.units import ns_text, rounded_ratio, share_text, us_from_ns

# Compute below a fifth of the step is not worth a change of threads, layout or precision.
CPU_COMPUTE_MIN_SHARE = 0.2
# Intra-op parallel efficiency assumed for the added threads (GEMMs and convolutions split well; the
# elementwise and reduction ops around them less).
THREAD_EFFICIENCY = 0.7
CONV_OP = re.compile(r"^aten::(?:mkldnn_convolution\w*|convolution_backward\w*|_slow_conv2d\w*|thnn_conv\w*|"
                     r"_convolution|convolution|conv[123]d|_nnpack\w*)$")
MATMUL_CPU_OP = re.compile(r"^aten::(?:mm|addmm|bmm|baddbmm|addmv|mv|_addmm_activation|linear_backward)$")
# Convolution time kept in channels_last (oneDNN's blocked NHWC kernels on AVX-512): assumed 1/1.25.
CHANNELS_LAST_FACTOR = 1.25
# The math at the fp32 peak runs this many times faster in bf16: AMX tiles, or AVX512-BF16 dot products (assumed).
BF16_FACTOR = {"amx_bf16": 2.5, "avx512_bf16": 1.5}


def _cpu_compute(ctx: Context) -> float:
    return ctx.part_ns("cpu_compute")


# What a trace alone does not say, that a fix needs to know (a live capture records it: `stepscope run`).
UNKNOWN = {"cpu_threads": "torch's thread count and the cores", "channels_last": "the model's memory format and "
           "the CPU's kernels (AVX2, AVX-512)", "cpu_bf16": "whether the CPU has native bf16 and autocast is on"}


def _not_worth(ctx: Context, fix: str) -> list[s.Recommendation | s.Considered] | None:
    """Why a CPU fix is left out before its own conditions: not a CPU run (nothing said), what it needs to know
    unknown, or too little compute to change. None: it is worth weighing."""
    if ctx.accelerator != "cpu" or not ctx.step_ns:
        return []
    if ctx.settings is None and fix in UNKNOWN:
        return [s.Considered(id=fix, reason=f"a trace alone does not say {UNKNOWN[fix]}: run the program under "
                                            "`stepscope run` to have this fix weighed")]
    compute = _cpu_compute(ctx)
    if compute < CPU_COMPUTE_MIN_SHARE * ctx.step_ns:
        return [s.Considered(id=fix, reason=f"the ops compute {share_text(compute / ctx.step_ns)} of the step, "
                                            f"under the {CPU_COMPUTE_MIN_SHARE:.0%} worth this change")]
    return None


def _below_bar(fix: str, est: Estimate) -> list[s.Recommendation | s.Considered]:
    return [s.Considered(id=fix, reason=f"estimated {est.speedup:.2f}x, under the {MIN_GAIN:.2f}x a "
                                        f"recommendation needs: {est.text}")]


def cpu_threads(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation | s.Considered]:
    """Fewer intra-op threads than available cores while the step computes."""
    skip = _not_worth(ctx, "cpu_threads")
    if skip is not None:
        return skip
    st = ctx.settings
    assert st is not None
    if not st.cpu_cores or not st.intra_op_threads:
        return [s.Considered(id="cpu_threads", reason="the cores or torch's thread count were not recorded")]
    threads, cores = st.intra_op_threads, st.cpu_cores
    workers = st.dataloader.num_workers if st.dataloader is not None else 0
    target = cores - workers  # DataLoader workers need their cores too
    if target <= threads:
        left = f", less {workers} for the DataLoader's workers" if workers else ""
        return [s.Considered(id="cpu_threads", reason=f"torch already runs {threads} threads on the {cores} cores "
                                                      f"this process may use{left}")]
    compute = _cpu_compute(ctx)
    faster = (threads + (target - threads) * THREAD_EFFICIENCY) / threads
    est = step_without(ctx, compute * (1 - 1 / faster),
                       f"Op compute over {target} threads instead of {threads} (assuming {THREAD_EFFICIENCY:.0%} "
                       "parallel efficiency for the added ones)")
    if est.speedup < MIN_GAIN:
        return _below_bar("cpu_threads", est)
    title = (f"Use the free cores: torch.set_num_threads({target}) (torch runs {threads} thread"
             f"{'s' if threads != 1 else ''} on {cores} cores)")
    return [recommendation(ctx, "cpu_threads", title, {
        "intra_op_threads": threads, "cpu_cores": cores, "dataloader_workers": workers,
        "cpu_compute_share": rounded_ratio(compute / ctx.step_ns)}, est)]


def channels_last(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation | s.Considered]:
    """NCHW convolutions on an AVX-512 CPU."""
    skip = _not_worth(ctx, "channels_last")
    if skip is not None:
        return skip
    st = ctx.settings
    assert st is not None
    if st.channels_last is not False:
        return [s.Considered(id="channels_last", reason="the model is in channels_last already" if st.channels_last
                             else "the model's memory format was not recorded")]
    if st.cpu_capability != "AVX512":
        return [s.Considered(id="channels_last", reason=(
            f"this CPU's kernels are {st.cpu_capability or 'unknown'}: oneDNN's channels_last convolutions pay on "
            "AVX-512; on this project's AVX2 machine ResNet-18 ran slower in channels_last (`stepscope tune "
            "--fixes channels_last` measures it here)"))]
    conv = op_self_time(ctx.facts.trace, ctx.facts.steps, CONV_OP)
    if conv < CPU_COMPUTE_MIN_SHARE * ctx.step_ns:
        return [s.Considered(id="channels_last", reason=f"convolutions are {share_text(conv / ctx.step_ns)} of the "
                                                        f"step, under {CPU_COMPUTE_MIN_SHARE:.0%}")]
    est = step_without(ctx, conv * (1 - 1 / CHANNELS_LAST_FACTOR),
                       f"Convolution time / {CHANNELS_LAST_FACTOR} in oneDNN's channels_last kernels (assumed)")
    title = ("Run the convolutions in channels_last: model = model.to(memory_format=torch.channels_last), "
             "x = x.to(memory_format=torch.channels_last)")
    return [recommendation(ctx, "channels_last", title, {
        "conv_us_per_step": us_from_ns(conv), "conv_share": rounded_ratio(conv / ctx.step_ns),
        "conv_layers": st.conv_layers,
        "cpu_capability": st.cpu_capability}, est)]


def _math_ns(ctx: Context) -> float:
    """Matmul and convolution op time per step (their own time)."""
    trace, steps = ctx.facts.trace, ctx.facts.steps
    return op_self_time(trace, steps, CONV_OP) + op_self_time(trace, steps, MATMUL_CPU_OP)


def cpu_bf16(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation | s.Considered]:
    """fp32 matmuls and convolutions on a CPU with native bf16, autocast off."""
    skip = _not_worth(ctx, "cpu_bf16")
    if skip is not None:
        return skip
    st = ctx.settings
    assert st is not None
    if st.cpu_bf16 not in BF16_FACTOR:
        return [s.Considered(id="cpu_bf16", reason="this CPU has no native bf16 (no AMX or AVX512-BF16 flag): "
                                                   "bf16 matmuls and convolutions would be emulated, not faster")]
    if st.autocast != "off":
        return [s.Considered(id="cpu_bf16", reason=f"autocast is on already ({st.autocast})")]
    math = _math_ns(ctx)
    if math < CPU_COMPUTE_MIN_SHARE * ctx.step_ns:
        return [s.Considered(id="cpu_bf16", reason=f"matmuls and convolutions are {share_text(math / ctx.step_ns)} "
                                                   f"of the step, under {CPU_COMPUTE_MIN_SHARE:.0%}")]
    factor = BF16_FACTOR[st.cpu_bf16]
    ops = bf16_ops(ctx, factor)
    if ops is None:
        return [s.Considered(id="cpu_bf16", reason="the ops' sizes (record_shapes) or the CPU's peak (its clock and "
                                                   "vector units) were not recorded: what bf16 gains and its casts "
                                                   "cost cannot be priced")]
    step = ctx.step_ns
    new = max(step - ops.gain_ns, 1.0)
    speedup = step / new
    est = Estimate(speedup, (
        f"{ops.ops} fp32 matmuls and convolutions a step take {ns_text(ops.time_ns)}, {ops.at_peak:.0%} of it math "
        f"at the CPU's fp32 peak (their FLOP rate against it), which bf16 runs {factor}x faster on this CPU's "
        f"{st.cpu_bf16} (assumed): {ns_text(ops.saved_ns)} saved; autocast's casts move "
        f"{ops.cast_bytes / 1e6:.0f} MB a step (fp32 operands read, bf16 written, and the gradients back) at "
        f"{CAST_BYTES_PER_S / 1e9:.0f} GB/s: {ns_text(ops.cast_ns)}: {step_to(ctx, step, new)} "
        f"({speedup:.2f}x). {CAVEAT}"))
    if est.speedup < MIN_GAIN:
        return _below_bar("cpu_bf16", est)
    title = (f"Compute in bf16 on this CPU ({st.cpu_bf16}): with torch.autocast('cpu', dtype=torch.bfloat16): "
             f"around the forward ({share_text(math / ctx.step_ns)} of the step is matmuls and convolutions)")
    return [recommendation(ctx, "cpu_bf16", title, {
        "matmul_conv_us_per_step": us_from_ns(math), "cpu_flag": st.cpu_bf16, "autocast": st.autocast,
        "math_at_peak_share": rounded_ratio(ops.at_peak), "bf16_saved_us_per_step": us_from_ns(ops.saved_ns),
        "cast_bytes_per_step": round(ops.cast_bytes), "cast_us_per_step": us_from_ns(ops.cast_ns)}, est)]


def torch_compile_cpu(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation | s.Considered]:
    """A CPU run's torch.compile (host.torch_compile hands CPU runs here): Python overhead to remove, else the
    elementwise and normalisation ops around the convolutions and matmuls to fuse while the step computes."""
    overhead = next((p for p in patterns if p.id == "python_overhead"), None)
    if overhead is not None:
        est = step_without(ctx, FUSION_TIME_KEPT * overhead.share * ctx.step_ns,
                           "Half the Python and dispatch time removed by compiled, fused code")
        return [recommendation(ctx, "torch_compile", "Compile the model: model = torch.compile(model)",
                               {"python_overhead_share": overhead.share}, est)]
    skip = _not_worth(ctx, "torch_compile")
    if skip is not None:
        return skip
    other = max(_cpu_compute(ctx) - _math_ns(ctx), 0.0)
    est = step_without(ctx, FUSION_TIME_KEPT * other,
                       f"The op time outside matmuls and convolutions ({share_text(other / ctx.step_ns)} of the step: "
                       "elementwise, normalisation, pooling) halved by compiled, fused and vectorised kernels "
                       "(assumed)")
    if est.speedup < MIN_GAIN:
        return _below_bar("torch_compile", est)
    title = ("Compile the model to fuse its elementwise and normalisation ops: model = torch.compile(model) "
             f"({share_text(other / ctx.step_ns)} of the step is ops outside matmuls and convolutions)")
    return [recommendation(ctx, "torch_compile", title, {
        "fusable_op_us_per_step": us_from_ns(other), "fusable_op_share": rounded_ratio(other / ctx.step_ns)}, est)]

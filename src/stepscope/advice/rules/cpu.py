"""Fixes for a training step that computes on the CPU: each only where the program's settings and the CPU
allow it (a live capture knows both; a trace alone is given none of these, rather than guesses).

- `cpu_threads`: torch uses fewer intra-op threads than the cores this process may run on.
- `channels_last`: convolutions in NCHW on a CPU whose kernels are AVX-512 (oneDNN's NHWC path pays there;
  measured on this project's AVX2 test machine, ResNet-18 ran slower in channels_last, so no advice there).
- `cpu_bf16`: matmuls and convolutions in fp32 on a CPU with native bf16 (AMX or AVX512-BF16), autocast off.
"""

from __future__ import annotations

import re

from stepscope.advice.context import Context
from stepscope.advice.recommendation import MIN_GAIN, recommendation
from stepscope.advice.whatif import step_without
from stepscope.analysis.hostwork import op_self_time
from stepscope.model import report as s
from stepscope.units import rounded_ratio, share_text, us_from_ns

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
# Matmul and convolution time divided by this in bf16: AMX tiles, or AVX512-BF16 dot products (assumed).
BF16_FACTOR = {"amx_bf16": 2.5, "avx512_bf16": 1.5}


def _cpu_compute(ctx: Context) -> float:
    return ctx.part_ns("cpu_compute")


def _compute_bound(ctx: Context) -> bool:
    return ctx.accelerator == "cpu" and ctx.settings is not None and bool(ctx.step_ns) and \
        _cpu_compute(ctx) >= CPU_COMPUTE_MIN_SHARE * ctx.step_ns


def cpu_threads(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """Fewer intra-op threads than available cores while the step computes."""
    st = ctx.settings
    if not _compute_bound(ctx) or st is None or not st.cpu_cores or not st.intra_op_threads:
        return []
    threads, cores = st.intra_op_threads, st.cpu_cores
    workers = st.dataloader.num_workers if st.dataloader is not None else 0
    target = cores - workers  # DataLoader workers need their cores too
    if target <= threads:
        return []
    compute = _cpu_compute(ctx)
    faster = (threads + (target - threads) * THREAD_EFFICIENCY) / threads
    est = step_without(ctx, compute * (1 - 1 / faster),
                       f"Op compute over {target} threads instead of {threads} (assuming {THREAD_EFFICIENCY:.0%} "
                       "parallel efficiency for the added ones)")
    if est.speedup < MIN_GAIN:
        return []
    title = f"Use the free cores: torch.set_num_threads({target}) (torch runs {threads} threads on {cores} cores)"
    return [recommendation(ctx, "cpu_threads", title, {
        "intra_op_threads": threads, "cpu_cores": cores, "dataloader_workers": workers,
        "cpu_compute_share": rounded_ratio(compute / ctx.step_ns)}, est)]


def channels_last(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """NCHW convolutions on an AVX-512 CPU."""
    st = ctx.settings
    if not _compute_bound(ctx) or st is None or st.channels_last is not False or st.cpu_capability != "AVX512":
        return []
    conv = op_self_time(ctx.facts.trace, ctx.facts.steps, CONV_OP) * ctx.host_scale
    if conv < CPU_COMPUTE_MIN_SHARE * ctx.step_ns:
        return []
    est = step_without(ctx, conv * (1 - 1 / CHANNELS_LAST_FACTOR),
                       f"Convolution time / {CHANNELS_LAST_FACTOR} in oneDNN's channels_last kernels (assumed)")
    title = ("Run the convolutions in channels_last: model = model.to(memory_format=torch.channels_last), "
             "x = x.to(memory_format=torch.channels_last)")
    return [recommendation(ctx, "channels_last", title, {
        "conv_us_per_step": us_from_ns(conv), "conv_share": rounded_ratio(conv / ctx.step_ns),
        "conv_layers": st.conv_layers,
        "cpu_capability": st.cpu_capability}, est)]


def cpu_bf16(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """fp32 matmuls and convolutions on a CPU with native bf16, autocast off."""
    st = ctx.settings
    if not _compute_bound(ctx) or st is None or st.cpu_bf16 not in BF16_FACTOR or st.autocast != "off":
        return []
    trace, steps = ctx.facts.trace, ctx.facts.steps
    math = (op_self_time(trace, steps, CONV_OP) + op_self_time(trace, steps, MATMUL_CPU_OP)) * ctx.host_scale
    if math < CPU_COMPUTE_MIN_SHARE * ctx.step_ns:
        return []
    factor = BF16_FACTOR[st.cpu_bf16]
    est = step_without(ctx, math * (1 - 1 / factor),
                       f"Matmul and convolution time / {factor} in bf16 on this CPU's {st.cpu_bf16} (assumed)")
    title = (f"Compute in bf16 on this CPU ({st.cpu_bf16}): with torch.autocast('cpu', dtype=torch.bfloat16): "
             f"around the forward ({share_text(math / ctx.step_ns)} of the step is matmuls and convolutions)")
    return [recommendation(ctx, "cpu_bf16", title, {
        "matmul_conv_us_per_step": us_from_ns(math), "cpu_flag": st.cpu_bf16, "autocast": st.autocast}, est)]

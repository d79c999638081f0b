"""The step meter's section: the job measured unprofiled, its phases (which add up to the headline step), its
spread, and the DataLoader workers' side. Selects and formats; every figure is the Report's."""

from __future__ import annotations

from stepscope.model.report import Report
from stepscope.report.tables import Cell, Table
from stepscope.units import share_cell, us_cell

LABELS = {"data": "waiting for data", "forward": "forward", "backward": "backward", "optimizer": "optimizer step",
          "sync": "blocked in device syncs", "other": "other (your loop's own work)"}

INTRO = ("Every step measured without the profiler by light hooks (DataLoader, the model's forward, backward, the "
         "optimizer step, device syncs); the phases are the training thread's exclusive time and add up to the step.")


def meter_table(report: Report) -> Table | None:
    m = report.meter
    if m is None:
        return None
    rows = [[Cell(LABELS.get(p.name, p.name), None, "text"), Cell(us_cell(p.mean_us), p.mean_us),
             Cell(share_cell(p.share), p.share)] for p in m.phases]
    footer = [[Cell("step", None, "text"), Cell(us_cell(m.step_us), m.step_us), Cell("100%")]]
    columns = [("phase", "text"), ("per step", ""), ("share", "")]
    if m.device_phases:  # the device's split: a phase runs on it from the host's entry to the next phase's
        on_device = {p.name: p for p in m.device_phases}
        for row, phase in zip(rows, m.phases, strict=True):
            d = on_device.get(phase.name)
            row.append(Cell(f"{us_cell(d.mean_us)} ({share_cell(d.share)})", d.mean_us) if d else Cell("", None))
        footer[0].append(Cell(us_cell(m.device_step_us), m.device_step_us))
        columns.append(("on the device", ""))
    return Table(columns, rows, id="meter", footer=footer)


def meter_lead(report: Report) -> list[str]:
    m = report.meter
    if m is None:
        return []
    lead = [f"{us_cell(m.step_us)} per step, the mean of {m.steps} steps {m.basis} (median {us_cell(m.median_us)}, "
            f"p10-p90 {us_cell(m.p10_us)}-{us_cell(m.p90_us)}; {m.steps_measured} steps measured"
            + (f"; first step {us_cell(m.first_step_us)}, left out" if m.first_step_us is not None else "") + ")"]
    if m.device_step_us is not None:
        lead.append(f"the device's time per step (CUDA events): {us_cell(m.device_step_us)}"
                    + ("; on the device a phase runs from the host's entry into it to the next phase's, data and "
                       "syncs fall in other" if m.device_phases else "")
                    + (f"; NVML: a kernel ran {share_cell(m.device_busy)} of the time" if m.device_busy is not None
                       else ""))
    if m.after_step_us is not None:
        change = f", {m.changed_after:+.0%}: the process changed (see the notes)" if m.changed_after is not None else ""
        lead.append(f"after the profiler: {us_cell(m.after_step_us)} per step over {m.after_steps} steps{change}")
    w = m.workers
    if w is not None:
        cpu = f", {us_cell(w.batch_cpu_us)} of it on a CPU" if w.batch_cpu_us is not None else ""
        lead.append(f"DataLoader workers: {w.workers} made {w.batches} batches, {us_cell(w.batch_us)} each{cpu}; "
                    f"busy {share_cell(w.busy_share)} of the time")
    return lead

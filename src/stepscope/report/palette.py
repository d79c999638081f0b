"""Colours and labels shared by the HTML pages' charts and tables (and the diff's text)."""

from __future__ import annotations

BREAKDOWN_COLORS = {
    "kernel": "#4c78a8", "memcpy": "#f58518", "memset": "#ff9d4d", "communication": "#72b7b2",
    "runtime": "#eeca3b", "dataloader": "#e45756", "cpu_exec": "#54a24b", "other": "#bab0ac",
}
BREAKDOWN_LABELS = {
    "kernel": "kernel", "memcpy": "memcpy", "memset": "memset", "communication": "communication",
    "runtime": "runtime", "dataloader": "DataLoader", "cpu_exec": "CPU ops", "other": "other",
}
IDLE_COLORS = {"busy": "#4c78a8", "host_wait": "#d62728", "kernel_wait": "#ff9da6", "other": "#c7c7c7"}
IDLE_LABELS = {"busy": "busy (kernels)", "host_wait": "idle: host wait", "kernel_wait": "idle: kernel wait",
               "other": "idle: other"}
TIMELINE_COLORS = {**BREAKDOWN_COLORS, "idle_host_wait": IDLE_COLORS["host_wait"],
                   "idle_kernel_wait": IDLE_COLORS["kernel_wait"], "idle_other": IDLE_COLORS["other"]}
TIMELINE_LABELS = {**BREAKDOWN_LABELS, "idle_host_wait": "GPU idle: host wait",
                   "idle_kernel_wait": "GPU idle: kernel wait", "idle_other": "GPU idle: other"}

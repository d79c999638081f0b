"""The hardware table: each row's figures against the vendor documents, no figure without a source, dense and
sparse never mixed, device names resolved, the user's file applied, the achievable column kept per device."""

from __future__ import annotations

import json

import pytest

from stepscope.errors import StepscopeError
from stepscope.hardware import achievable_for, load_table, save_achievable

# Figures as the vendors' documents state them (dense TFLOP/s; the datasheets' "with sparsity" figures halved
# by hand here), independent of the data file. One entry per row, several figures each.
DATASHEET = {
    "v100-sxm2": {"fp32": 15.7, "fp16": 125, "bandwidth": 900, "memory": 32, "tdp": 300},
    "v100-pcie": {"fp32": 14, "fp16": 112, "bandwidth": 900, "tdp": 250},
    "t4": {"fp32": 8.1, "fp16": 65, "int8": 130, "bandwidth": 320, "memory": 16, "tdp": 70},
    "a10g": {"bandwidth": 600, "memory": 24},
    "a100-sxm-40gb": {"fp32": 19.5, "tf32": 312 / 2, "bf16": 624 / 2, "bandwidth": 1555, "memory": 40, "tdp": 400},
    "a100-sxm-80gb": {"bf16": 624 / 2, "fp16": 624 / 2, "int8": 1248 / 2, "bandwidth": 2039, "memory": 80},
    "a100-pcie-40gb": {"bf16": 312, "bandwidth": 1555, "tdp": 250},
    "a100-pcie-80gb": {"bf16": 312, "bandwidth": 1935, "tdp": 300},
    "l4": {"fp32": 30.3, "tf32": 120 / 2, "bf16": 242 / 2, "fp8": 485 / 2, "bandwidth": 300, "memory": 24, "tdp": 72},
    "l40s": {"fp32": 91.6, "tf32": 366 / 2, "fp8": 1466 / 2, "bandwidth": 864, "memory": 48, "tdp": 350},
    "h100-sxm": {"fp32": 67, "tf32": 989 / 2, "bf16": 1979 / 2, "fp8": 3958 / 2, "bandwidth": 3350, "memory": 80,
                 "tdp": 700},
    "h100-pcie": {"fp32": 51, "tf32": 756 / 2, "bf16": 1513 / 2, "fp8": 3026 / 2, "bandwidth": 2000, "tdp": 350},
    "h200": {"fp32": 67, "bf16": 1979 / 2, "fp8": 3958 / 2, "bandwidth": 4800, "memory": 141, "tdp": 700},
    "b200": {"fp32": 75, "tf32": 2200 / 2, "bf16": 4500 / 2, "fp8": 9000 / 2, "bandwidth": 7700, "memory": 180,
             "tdp": 1000},
    "rtx-4090": {"fp32": 82.6, "bf16": 165.2, "fp16": 165.2, "bandwidth": 1008, "memory": 24, "tdp": 450},
    "mi250x": {"fp32": 95.7, "bf16": 383, "fp16": 383, "memory": 128},
    "mi250": {"fp32": 90.5, "bf16": 362.1, "memory": 128},
    "mi300x": {"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp8": 2614.9, "bandwidth": 5300, "memory": 192,
               "tdp": 750},
}
CELL = {"bandwidth": "memory_bandwidth_gbs", "memory": "memory_gb", "tdp": "tdp_w"}


@pytest.fixture(scope="module")
def table():
    return load_table(use_user_file=False)


@pytest.mark.parametrize("gpu_id", sorted(DATASHEET))
def test_row_has_the_vendors_figures(table, gpu_id: str) -> None:
    spec = table.gpu(gpu_id)
    assert spec is not None
    for name, expected in DATASHEET[gpu_id].items():
        got = getattr(spec, CELL[name]).value if name in CELL else spec.peaks[name].dense
        assert got == pytest.approx(expected, rel=1e-3), f"{gpu_id} {name}"


def test_the_issues_named_figures(table) -> None:
    """The issue's examples, and the known-wrong public figures (PyTorch's device_info.py: L4 3350 GB/s, sparse
    bf16 for H100 and L4, the A100's TF32 for the H100; Lightning's sparse H200) are not what we have."""
    assert table.gpu("l4").memory_bandwidth_gbs.value == 300
    assert table.gpu("h100-sxm").peaks["bf16"].dense == pytest.approx(989, abs=1)
    assert table.gpu("h100-sxm").peaks["tf32"].dense != 156
    assert table.gpu("l4").peaks["bf16"].dense != 242
    assert table.gpu("h200").peaks["bf16"].dense != 1979


def test_every_row_the_brief_names_is_there(table) -> None:
    assert set(DATASHEET) <= {g.id for g in table.gpus}


def test_no_figure_lacks_a_source(table) -> None:
    missing = []
    for spec in table.gpus:
        for name, cell in spec.cells():
            value = cell.dense if hasattr(cell, "dense") else cell.value
            if value is None or value == ():
                if not cell.note:
                    missing.append(f"{spec.id} {name}: no figure and no reason")
            elif cell.source not in table.sources:
                missing.append(f"{spec.id} {name}: source {cell.source!r}")
    for link in table.interconnects:
        for cell in (link.bidirectional_gbs, link.per_direction_gbs):
            if cell.source not in table.sources:
                missing.append(f"{link.id}: source {cell.source!r}")
    for price in table.prices:
        if price.source not in table.sources or not price.as_of:
            missing.append(f"{price.instance}: source or date")
    assert not missing, "\n".join(missing)
    for source in table.sources.values():
        assert source.title and source.kind and (source.url or source.note), source.id


def test_dense_and_sparse_never_mixed(table) -> None:
    for spec in table.gpus:
        for dtype, peak in spec.peaks.items():
            if peak.sparse is not None:
                assert peak.sparse == pytest.approx(2 * peak.dense, rel=0.02), f"{spec.id} {dtype}"


def test_unsupported_dtypes_have_no_peak(table) -> None:
    assert table.gpu("v100-sxm2").peak_flops("bfloat16") is None  # Volta has no bf16 tensor cores
    assert table.gpu("a100-sxm-80gb").peak_flops("fp8") is None
    assert table.gpu("t4").peak_flops("tf32") is None


@pytest.mark.parametrize(("device", "gpu_id"), [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H200", "h200"),
    ("Tesla V100-SXM2-32GB", "v100-sxm2"),
    ("Tesla V100-SXM2-16GB", "v100-sxm2"),
    ("Tesla V100-PCIE-32GB", "v100-pcie"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"),
    ("Tesla T4", "t4"),
    ("NVIDIA A10G", "a10g"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA B200", "b200"),
    ("AMD Instinct MI300X", "mi300x"),
    ("h100", "h100-sxm"),
    ("A100", "a100-sxm-80gb"),
])
def test_device_names_resolve(table, device: str, gpu_id: str) -> None:
    assert table.lookup(device).spec.id == gpu_id


def test_other_parts_are_not_mistaken_for_a_row(table) -> None:
    for device in ("NVIDIA H200 NVL", "NVIDIA H100 NVL", "Tesla V100S-PCIE-32GB", "NVIDIA A10", "NVIDIA L40"):
        assert table.lookup(device) is None, device


def test_a_part_of_a_known_family_is_matched_by_its_sm_count_with_a_note(table) -> None:
    """The TensorBoard plugin's sample traces ran on 'Tesla V100-DGXS-32GB' (a DGX Station's V100: SXM2-class,
    80 SMs); no row spells that name, the V100 family's SXM2 row has its SM count."""
    match = table.lookup("Tesla V100-DGXS-32GB", sm_count=80)
    assert match is not None and match.spec.id == "v100-sxm2" and match.matched_by == "family"
    assert "Tesla V100-DGXS-32GB" in match.note and "80 SMs" in match.note
    assert table.lookup("Tesla V100-DGXS-32GB") is None  # without the SM count nothing is assumed
    assert table.lookup("Tesla V100-DGXS-32GB", sm_count=84) is None  # no V100 row has 84


def test_a_shared_mi250_name_is_settled_by_the_cu_count(table) -> None:
    name = "AMD Instinct MI250X/MI250"
    assert table.lookup(name, sm_count=110).spec.id == "mi250x"
    assert table.lookup(name, sm_count=104).spec.id == "mi250"
    guess = table.lookup(name)
    assert guess.spec.id == "mi250x" and "assumed" in guess.note


def test_per_device_figures_of_a_two_die_package(table) -> None:
    """PyTorch sees each MI250X GCD as a device: 383 TF and 3.2768 TB/s per package are half per device."""
    spec = table.gpu("mi250x")
    assert spec.peak_flops("bf16") == pytest.approx(191.5e12)
    assert spec.peak_flops("bf16", per_device=False) == pytest.approx(383e12)
    assert spec.memory_bandwidth() == pytest.approx(1638.4e9)
    assert spec.memory_bytes() == 64 * 2**30


def test_interconnects_and_prices_for_prediction(table) -> None:
    assert table.interconnect("nvlink4").bidirectional_gbs.value == 900
    assert table.interconnect("pcie4").per_direction_gbs.value == pytest.approx(16 * 16 * 128 / 130 / 8, rel=1e-3)
    assert table.interconnect("ib-ndr").per_direction_gbs.value == 400 / 8
    for spec in table.gpus:
        for link in spec.links.value:
            assert table.interconnect(link) is not None, (spec.id, link)
    gpu_ids = {g.id for g in table.gpus}
    for price in table.prices:
        assert price.gpu in gpu_ids and price.usd_per_gpu_hour > 0
    assert table.prices_for("h100-sxm")


def write(path, doc) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def test_user_file_replaces_cells_and_adds_rows(tmp_path) -> None:
    user = write(tmp_path / "hw.json", {
        "sources": {"bench": {"title": "our bench", "kind": "device-report", "url": "lab wiki", "date": "2026"}},
        "gpus": [
            {"id": "h100-sxm", "tdp_w": {"value": 500, "source": "bench"}, "peak_tflops": {"fp8": {"dense": 1000}}},
            {"id": "my-gpu", "name": "My GPU", "match": ["^acme x1$"], "memory_bandwidth_gbs": {"value": 100}},
        ],
        "prices": [{"provider": "lab", "instance": "box", "gpu": "my-gpu", "gpu_count": 2, "region": None,
                    "pricing": "on_demand", "usd_per_hour": 3.0, "as_of": "2026-11"}],
    })
    table = load_table(user)
    h100 = table.gpu("h100-sxm")
    assert h100.tdp_w.value == 500 and h100.tdp_w.source == "bench"
    assert h100.peaks["fp8"].dense == 1000 and table.sources[h100.peaks["fp8"].source].kind == "user-file"
    assert h100.peaks["bf16"].dense == 989.5  # untouched cells stay the datasheet's
    mine = table.lookup("ACME X1").spec
    assert mine.memory_bandwidth() == 100e9 and mine.memory_bandwidth_gbs.source == "user-file"
    assert table.prices_for("my-gpu")[0].usd_per_gpu_hour == 1.5


@pytest.mark.parametrize(("doc", "problem"), [
    ("{not json", "not valid JSON"),
    ({"gpus": {"id": "x"}}, "'gpus' must be a JSON list"),
    ({"gpus": [{"id": "h100-sxm", "peak_tflops": {"bf16": {"dense": 989.5, "sparse": 989.5}}}]}, "not twice"),
    ({"gpus": [{"id": "h100-sxm", "peak_tflops": {"bf17": {"dense": 1}}}]}, "unknown dtypes"),
    ({"gpus": [{"id": "x", "name": "X", "tdp_w": {"value": 1, "source": "nowhere"}}]}, "not in the sources"),
    ({"cpus": []}, "unknown parts"),
])
def test_a_bad_user_file_is_one_clear_error(tmp_path, doc, problem) -> None:
    path = tmp_path / "hw.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(StepscopeError) as err:
        load_table(path)
    assert str(path) in err.value.message and problem in err.value.message


def test_default_user_file_from_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STEPSCOPE_HARDWARE_FILE", write(tmp_path / "hw.json", {"gpus": [
        {"id": "l4", "tdp_w": {"value": 60}}]}))
    assert load_table().gpu("l4").tdp_w.value == 60
    monkeypatch.setenv("STEPSCOPE_HARDWARE_FILE", str(tmp_path / "absent.json"))
    with pytest.raises(StepscopeError):
        load_table(tmp_path / "absent.json")


def test_achievable_shipped_and_kept_per_device(tmp_path) -> None:
    shipped = achievable_for("NVIDIA H200", directory=tmp_path)
    # The H200 measurement in tests/data/gpu_h200/achievable.json: 778.1 TFLOP/s bf16, 4202 GB/s copy.
    assert shipped.flops("bf16") == pytest.approx(778.109e12, rel=1e-5)
    assert shipped.memory_bytes_per_s == pytest.approx(4202.18e9, rel=1e-5)
    assert achievable_for("NVIDIA L4", directory=tmp_path) is None  # only the datasheet is known
    mine = {"device": "NVIDIA L4", "measured_at": "2026-11-22", "flops_per_s": {"bfloat16": 9.0e13, "tf32": 4e13},
            "memory_bytes_per_s": 2.5e11}
    path = save_achievable(mine, directory=tmp_path)
    kept = achievable_for("nvidia  l4", directory=tmp_path)
    assert kept.flops("bfloat16") == 9.0e13 and kept.flops("tf32") == 4e13 and kept.origin == str(path)
    save_achievable({**mine, "device": "NVIDIA H200", "flops_per_s": {"bfloat16": 7e14}}, directory=tmp_path)
    assert achievable_for("NVIDIA H200", directory=tmp_path).flops("bf16") == 7e14  # the user's own first


def test_measure_says_plainly_when_there_is_no_gpu(capsys) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    from stepscope.hardware.measure import main

    assert main(["--no-save"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_the_docs_list_every_row_and_source(table) -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "hardware.md").read_text()
    for spec in table.gpus:
        assert f"`{spec.id}`" in doc, spec.id
    for source in table.sources.values():
        assert f"`{source.id}`" in doc and (not source.url or source.url in doc), source.id


def test_measure_json_to_stdout_is_the_json_alone(capsys, monkeypatch, tmp_path) -> None:
    """`measure --json -`: the document alone on stdout (it wrote a file named '-'), the figures on stderr."""
    import json

    from stepscope.hardware import measure as m

    planted = {"device": "NVIDIA L4", "flops_per_s": {"bfloat16": 9.0e13}, "memory_bytes_per_s": 2.5e11}
    monkeypatch.setattr(m, "measure", lambda: planted)
    monkeypatch.chdir(tmp_path)
    assert m.main(["--json", "-", "--no-save"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out) == planted and "90.0 TFLOP/s" in out.err and not (tmp_path / "-").exists()

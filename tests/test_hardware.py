"""Tests of the hardware model (npu_lab.hardware, npu_lab.presets; docs/cost_model_system.md).

Every number the simulator uses lives in a HardwareSpec, has a unit in its name and a provenance
(where the number came from). These tests pin the presets' key facts and the spec's contract:
validation with helpful errors, what-if copies labelled 'assumed', and a JSON round trip.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from npu_lab import HardwareSpec, HardwareSpecError, compare_presets, get_preset, list_presets
from npu_lab.hardware import FIELD_DOCS, PROVENANCE_KINDS
from npu_lab.presets import DATA_DIR
from npu_lab.sim.launch_cost import full_launch_overhead_us

KB = 1024
MB = 1024 * 1024
DATASHEET_PRESETS = ("ascend-910b2", "ascend-310p3")


def _article_available() -> bool:
    return (DATA_DIR / "article_fitted_chip.json").exists()


@pytest.fixture(params=DATASHEET_PRESETS)
def preset(request) -> HardwareSpec:
    return get_preset(request.param)


# ---- the presets' key numbers ----------------------------------------------------------------


def test_910b2_key_numbers():
    """910B2: 48 vector (AIV) + 24 cube (AIC) cores, 1.8 GHz, UB 192 KB per AIV (not the 256 KB
    the article assumes), L1 512 KB, L0A/L0B 64 KB, L0C 128 KB, L2 192 MB, HBM about 1.6 TB/s,
    about 20 us launch overhead."""
    hw = get_preset("ascend-910b2")
    assert (hw.vector_cores, hw.cube_cores) == (48, 24)
    assert hw.vector_cores == 2 * hw.cube_cores  # 1 AIC : 2 AIV
    assert hw.clock_ghz == 1.8
    assert hw.ub_bytes == 192 * KB
    assert (hw.l1_bytes, hw.l0a_bytes, hw.l0b_bytes, hw.l0c_bytes) == (512 * KB, 64 * KB, 64 * KB, 128 * KB)
    assert hw.l2_bytes == 192 * MB
    assert hw.hbm_bandwidth_gbps == pytest.approx(1600, rel=0.05)
    # about 20 us for an empty kernel on all 48 vector cores: the fixed part plus 48 per-core parts
    assert full_launch_overhead_us(hw) == pytest.approx(20)
    assert hw.launch_overhead_us + 48 * hw.launch_per_core_us == pytest.approx(20)


def test_310p3_key_numbers():
    """310P3: 8 AI cores, 1.06 GHz, UB 256 KB, L1 1 MB, L0C 256 KB, L2 16 MB, about 204 GB/s."""
    hw = get_preset("ascend-310p3")
    assert (hw.vector_cores, hw.cube_cores) == (8, 8)
    assert hw.clock_ghz == 1.06
    assert hw.ub_bytes == 256 * KB
    assert (hw.l1_bytes, hw.l0a_bytes, hw.l0b_bytes, hw.l0c_bytes) == (1 * MB, 64 * KB, 64 * KB, 256 * KB)
    assert hw.l2_bytes == 16 * MB
    assert hw.hbm_bandwidth_gbps == pytest.approx(204.8, rel=0.01)


def test_vector_unit_shape_is_shared_by_both_chips(preset):
    """One vector repeat is 8 blocks x 32 B = 256 B (64 fp32), at most 255 repeats per instruction."""
    assert preset.block_bytes == 32
    assert preset.vector_repeat_bytes == 8 * preset.block_bytes == 256
    assert preset.vector_elements_per_repeat_fp32 == 64
    assert preset.max_repeat == 255


def test_unit_conversions(preset):
    """cycles_per_us = GHz x 1000; GB/s / GHz = bytes per cycle; us <-> cycles are inverse."""
    assert preset.cycles_per_us == pytest.approx(preset.clock_ghz * 1e3)
    assert preset.bytes_per_cycle(preset.clock_ghz * 64) == pytest.approx(64)
    assert preset.cycles_to_us(preset.us_to_cycles(3.25)) == pytest.approx(3.25)
    assert preset.cores("vector") == preset.vector_cores
    assert preset.cores("cube") == preset.cube_cores
    with pytest.raises(ValueError, match="vector.*cube"):
        preset.cores("tensor")


def test_preset_names_are_case_insensitive_with_short_aliases():
    """'910b2', '910B2', ' ascend-910B2 ' all name the same preset; '310p3' likewise."""
    assert get_preset("910b2") == get_preset("ASCEND-910B2") == get_preset(" ascend-910b2 ")
    assert get_preset("310P3").name == "ascend-310p3"
    assert set(DATASHEET_PRESETS) <= set(list_presets())


def test_get_preset_passes_a_spec_through():
    """get_preset(spec) returns the spec itself, so APIs can take a name or a spec."""
    hw = get_preset("910b2").replace(ub_bytes=64 * KB)
    assert get_preset(hw) is hw


def test_unknown_preset_raises_key_error_listing_known_ones():
    """An unknown name raises KeyError naming every known preset."""
    with pytest.raises(KeyError) as info:
        get_preset("ascend-9000")
    msg = str(info.value)
    assert "ascend-9000" in msg
    for name in list_presets():
        assert name in msg


def test_non_string_preset_name_raises_type_error():
    """A preset is named by a string (or given as a spec); anything else is a TypeError."""
    with pytest.raises(TypeError, match="string"):
        get_preset(910)


# ---- provenance --------------------------------------------------------------------------------


def test_every_field_has_a_valid_provenance_in_each_datasheet_preset(preset):
    """Each FIELD_DOCS field has (kind, note) with kind in PROVENANCE_KINDS and a non-empty note,
    so the learner can always see where a number came from."""
    missing = [f for f in FIELD_DOCS if f not in preset.provenance]
    assert not missing, f"{preset.name}: no provenance for {missing}"
    for field, (kind, note) in preset.provenance.items():
        assert kind in PROVENANCE_KINDS, (field, kind)
        assert note.strip(), f"{preset.name}.{field}: empty provenance note"


def test_unpublished_numbers_are_labelled_assumed(preset):
    """Numbers nobody publishes (issue and pipeline latency of a vector instruction, scalar costs,
    DMA latency) say 'assumed' on both presets."""
    for field in ("vector_issue_cycles", "vector_latency_cycles", "scalar_ub_access_cycles",
                  "dma_latency_cycles", "sync_flag_cycles"):
        assert preset.provenance[field][0] == "assumed", field


RATE_FIELDS = ("vector_cycles_per_repeat", "vector_div_cycles_per_repeat", "vector_exp_cycles_per_repeat",
               "vector_reduce_cycles_per_repeat", "vector_sort_cycles_per_repeat",
               "vector_gather_mask_cycles_per_repeat", "cube_fractal_cycles")


def test_published_instruction_rates_are_vendor_doc_on_the_910b2_and_assumed_on_the_310p():
    """Vector指令理论性能汇总.md / Cube指令理论性能汇总.md cover Atlas A2/A3 (and the 950): on the
    910B2 the rates they publish are 'vendor-doc' and name the page; the 310P takes the same
    figures, labelled 'assumed' with the reason (nothing is published for it)."""
    b2, p3 = get_preset("ascend-910b2"), get_preset("ascend-310p3")
    for field in RATE_FIELDS:
        kind, note = b2.provenance[field]
        assert kind == "vendor-doc" and "理论性能汇总.md" in note, field
        kind, note = p3.provenance[field]
        assert kind == "assumed" and "310P" in note and "理论性能汇总.md" in note, field
        assert getattr(p3, field) == getattr(b2, field), field


def test_preset_rates_are_the_published_elements_per_cycle():
    """Each per-repeat figure is the page's element/cycle rate turned into cycles for the elements
    of one repeat (64 float32; 32 elements for a Sort32 repeat) — computed from the table, not
    typed in: e.g. Exp 32 element/cycle -> 2, ReduceRepeat 64/7 -> 7, Sort32 2 -> 16."""
    from npu_lab.presets import PUBLISHED_VECTOR_RATES, published_cycles_per_repeat

    hw = get_preset("ascend-910b2")
    pairs = {"vector_cycles_per_repeat": "Add", "vector_div_cycles_per_repeat": "Div",
             "vector_exp_cycles_per_repeat": "Exp", "vector_reduce_cycles_per_repeat": "ReduceRepeat",
             "vector_gather_mask_cycles_per_repeat": "GatherMask"}
    for field, instruction in pairs.items():
        rate = PUBLISHED_VECTOR_RATES[instruction][1]["float"]
        assert getattr(hw, field) == pytest.approx(64 / float(rate)), field
    assert hw.vector_sort_cycles_per_repeat == 32 / PUBLISHED_VECTOR_RATES["Sort32"][1]["float"]
    assert published_cycles_per_repeat("Exp", "half") == 2 * published_cycles_per_repeat("Exp", "float")
    assert published_cycles_per_repeat("ReduceRepeat", "half") == published_cycles_per_repeat("ReduceRepeat")
    for bad in (dict(instruction="Exq"), dict(instruction="Exp", dtype="int8"), dict(instruction="Sort32", elements=0)):
        with pytest.raises(ValueError, match="published rate|elements"):
            published_cycles_per_repeat(**bad)


def test_labels_say_where_a_number_really_comes_from():
    """No preset claims a datasheet the sources lack: L2 bandwidth comes from a hypothetical in
    the guide (assumed), HBM bandwidth has no datasheet in the sources (assumed), the launch
    overhead is a reported measurement (measured); every vendor-doc / vendor-guide note names its
    page."""
    for name in DATASHEET_PRESETS:
        hw = get_preset(name)
        kinds = {f: k for f, (k, _) in hw.provenance.items()}
        assert "datasheet" not in kinds.values(), [f for f, k in kinds.items() if k == "datasheet"]
        assert kinds["l2_bandwidth_gbps"] == kinds["hbm_bandwidth_gbps"] == "assumed"
        for field, (kind, note) in hw.provenance.items():
            if kind in ("vendor-doc", "vendor-guide"):
                assert ".md" in note, (name, field, note)
    b2 = get_preset("ascend-910b2").provenance
    assert "假设" in b2["l2_bandwidth_gbps"][1] and "hypothetical" in b2["l2_bandwidth_gbps"][1]
    assert b2["launch_overhead_us"][0] == "measured"


def test_every_field_doc_names_a_numeric_spec_field_with_a_unit():
    """FIELD_DOCS (the table's unit/meaning source) covers exactly the numeric fields."""
    numeric = {f.name for f in dataclasses.fields(HardwareSpec)} - {"name", "description", "isa", "provenance",
                                                                  "disable_asc_reserved_ubuf"}   # a compile option, not a number
    assert set(FIELD_DOCS) == numeric
    for unit, meaning in FIELD_DOCS.values():
        assert unit and meaning


@pytest.mark.skipif(not _article_available(), reason="data/article_fitted_chip.json not generated yet")
def test_article_preset_loads_and_has_provenance():
    """The 'article' preset (fitted to the article's tileS table) is a valid spec whose fitted
    numbers say 'fitted'."""
    hw = get_preset("article")
    assert isinstance(hw, HardwareSpec)
    kinds = {kind for kind, _ in hw.provenance.values()}
    assert kinds <= set(PROVENANCE_KINDS)
    assert "fitted" in kinds


# ---- what-if copies ------------------------------------------------------------------------------


def test_replace_labels_changed_fields_assumed_and_keeps_the_rest():
    """replace() returns a new spec; changed fields become ('assumed', note), others keep theirs,
    and the original is untouched (frozen)."""
    hw = get_preset("910b2")
    what_if = hw.replace(ub_bytes=256 * KB, provenance_note="the article's UB")
    assert what_if.ub_bytes == 256 * KB and hw.ub_bytes == 192 * KB
    assert what_if.provenance["ub_bytes"] == ("assumed", "the article's UB")
    assert what_if.provenance["clock_ghz"] == hw.provenance["clock_ghz"]
    assert hw.provenance["ub_bytes"][0] == "vendor-config"
    with pytest.raises(dataclasses.FrozenInstanceError):
        hw.ub_bytes = 1  # type: ignore[misc]


def test_replace_with_explicit_provenance_keeps_it():
    """Passing provenance= explicitly wins over the automatic 'assumed' label."""
    hw = get_preset("910b2")
    prov = dict(hw.provenance)
    prov["clock_ghz"] = ("datasheet", "910B1 clock")
    b1 = hw.replace(clock_ghz=1.85, provenance=prov)
    assert b1.provenance["clock_ghz"] == ("datasheet", "910B1 clock")


def test_replace_rejects_unknown_fields_and_lists_valid_ones():
    """A typo in a what-if field raises HardwareSpecError naming it and listing the valid fields."""
    with pytest.raises(HardwareSpecError) as info:
        get_preset("910b2").replace(ub_kb=256)
    assert "ub_kb" in str(info.value) and "ub_bytes" in str(info.value)


# ---- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("change, words", [
    ({"vector_cores": 0}, ["vector_cores", "> 0"]),
    ({"hbm_bandwidth_gbps": -1.0}, ["hbm_bandwidth_gbps", "> 0"]),
    ({"core_dma_bandwidth_gbps": 0.0}, ["core_dma_bandwidth_gbps", "> 0"]),
    ({"clock_ghz": 0.0}, ["clock_ghz"]),
    ({"ub_bytes": 16}, ["ub_bytes", "32-byte block"]),
    ({"ub_bytes": "192KB"}, ["ub_bytes", "number"]),
    ({"clock_ghz": None}, ["clock_ghz", "number"]),
    ({"vector_cores": True}, ["vector_cores", "number"]),
    ({"vector_cores": 2.5}, ["vector_cores", "whole number"]),
    ({"dma_latency_cycles": -5.0}, ["dma_latency_cycles", ">= 0"]),
    ({"launch_overhead_us": float("inf")}, ["launch_overhead_us", "finite"]),
    ({"vector_repeat_bytes": 100}, ["vector_repeat_bytes", "multiple"]),
    ({"name": ""}, ["name"]),
])
def test_invalid_specs_raise_helpful_errors(change, words):
    """An invalid number raises HardwareSpecError naming the field and what would be valid."""
    with pytest.raises(HardwareSpecError) as info:
        get_preset("910b2").replace(**change)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_hardware_spec_error_is_a_value_error():
    """Callers that catch ValueError also catch bad hardware descriptions."""
    assert issubclass(HardwareSpecError, ValueError)


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_non_finite_integer_field_raises_hardware_spec_error(value):
    """ub_bytes=inf / nan must raise HardwareSpecError that names ub_bytes."""
    with pytest.raises(HardwareSpecError, match="ub_bytes"):
        get_preset("910b2").replace(ub_bytes=value)


def test_numpy_integers_are_accepted_as_numbers():
    """A core count that came out of numpy (np.int64) is a number like any other."""
    hw = get_preset("910b2").replace(vector_cores=np.int64(24))
    assert hw.vector_cores == 24


# ---- JSON ------------------------------------------------------------------------------------------


def test_json_round_trip_through_a_string(preset):
    """from_json(to_json()) gives an equal spec with the same provenance."""
    text = preset.to_json()
    assert json.loads(text)["name"] == preset.name
    back = HardwareSpec.from_json(text)
    assert back == preset
    assert dict(back.provenance) == dict(preset.provenance)


def test_json_round_trip_through_a_file(tmp_path, preset):
    """to_json(path) writes the file; from_json(path) (str or Path) reads it back."""
    path = tmp_path / "chip.json"
    preset.to_json(path)
    assert HardwareSpec.from_json(path) == preset
    back = HardwareSpec.from_json(str(path))
    assert back == preset and dict(back.provenance) == dict(preset.provenance)


def test_custom_chip_from_edited_json():
    """The documented way to describe a new chip: dump a preset, edit, load."""
    data = json.loads(get_preset("910b2").to_json())
    data.update(name="my-chip", ub_bytes=128 * KB)
    data["provenance"]["ub_bytes"] = ["assumed", "what if UB were 128 KB"]
    hw = HardwareSpec.from_json(json.dumps(data))
    assert (hw.name, hw.ub_bytes) == ("my-chip", 128 * KB)
    assert hw.provenance["ub_bytes"] == ("assumed", "what if UB were 128 KB")


def test_from_json_errors_are_helpful():
    """Malformed JSON, unknown fields, missing fields, bad provenance kinds: HardwareSpecError."""
    data = json.loads(get_preset("910b2").to_json())
    with pytest.raises(HardwareSpecError, match="parse"):
        HardwareSpec.from_json("{not json")
    with pytest.raises(HardwareSpecError, match="ub_kb"):
        HardwareSpec.from_json(json.dumps({**data, "ub_kb": 1}))
    partial = {k: v for k, v in data.items() if k != "clock_ghz"}
    with pytest.raises(HardwareSpecError, match="clock_ghz"):
        HardwareSpec.from_json(json.dumps(partial))
    bad = json.loads(json.dumps(data))
    bad["provenance"]["ub_bytes"] = ["rumour", "heard it somewhere"]
    with pytest.raises(HardwareSpecError, match="provenance"):
        HardwareSpec.from_json(json.dumps(bad))


# ---- table -----------------------------------------------------------------------------------------


def test_table_has_value_unit_provenance_columns(preset):
    """table(): one row per FIELD_DOCS field with value, unit, meaning, provenance, note."""
    table = preset.table()
    assert {"value", "unit", "provenance"} <= set(table.columns)
    assert list(table.index) == list(FIELD_DOCS)
    assert table.loc["ub_bytes", "value"] == preset.ub_bytes
    assert table.loc["ub_bytes", "unit"] == "bytes"
    assert table.loc["hbm_bandwidth_gbps", "unit"] == "GB/s"
    assert set(table["provenance"]) <= set(PROVENANCE_KINDS)


def test_table_marks_fields_without_provenance_unspecified():
    """A custom spec without provenance still tabulates, saying 'unspecified'."""
    hw = get_preset("910b2").replace(provenance={})
    assert set(hw.table()["provenance"]) == {"unspecified"}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_compare_presets_side_by_side():
    """compare_presets(): unit plus (preset, value) and (preset, provenance) columns."""
    table = compare_presets()
    assert table.loc["ub_bytes", ("ascend-910b2", "value")] == 192 * KB
    assert table.loc["ub_bytes", ("ascend-310p3", "value")] == 256 * KB
    assert "unit" in table.columns


def test_compare_presets_emits_no_deprecation_warning():
    """compare_presets() must keep working on the next pandas: no deprecation warnings."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compare_presets()


def test_fields_are_all_finite_numbers(preset):
    """Sanity: every preset number is finite and non-negative."""
    for field in FIELD_DOCS:
        value = getattr(preset, field)
        assert math.isfinite(value) and value >= 0, field


# ---- the reserved UB (issue 15 §4) --------------------------------------------------------
def test_usable_ub_is_the_2201_page_figure_and_the_option_frees_the_8kb():
    from npu_lab.presets import get_preset as preset

    b = preset("ascend-910b2")
    assert b.ub_usable_bytes == 192 * 1024 - 256 - 8 * 1024 == 188160
    assert b.replace(disable_asc_reserved_ubuf=True).ub_usable_bytes == 192 * 1024 - 256
    p = preset("ascend-310p3")
    assert p.ub_usable_bytes == 248 * 1024          # TMP_UB_OFFSET of __NPU_ARCH__ 2002
    assert "2201" in b.provenance["asc_reserved_ubuf_bytes"][1]
    assert "kernel_utils_constants.h" in p.provenance["asc_reserved_ubuf_bytes"][1]


def test_reserved_ub_fields_are_validated():
    from npu_lab.hardware import HardwareSpecError
    from npu_lab.presets import get_preset as preset

    b = preset("ascend-910b2")
    with pytest.raises(HardwareSpecError, match="leave"):
        b.replace(asc_reserved_ubuf_bytes=b.ub_bytes)
    with pytest.raises(HardwareSpecError, match="True or False"):
        b.replace(disable_asc_reserved_ubuf=1)
    with pytest.raises(HardwareSpecError, match=">= 0"):
        b.replace(ub_reserved_bytes=-1)


def test_the_allocator_hands_out_only_the_usable_ub():
    from npu_lab.lang.context import KernelContext
    from npu_lab.presets import get_preset as preset

    for name in ("ascend-910b2", "ascend-310p3"):
        hw = preset(name)
        assert KernelContext(hw, 0, 1, timing_only=True).ub.capacity_bytes == hw.ub_usable_bytes

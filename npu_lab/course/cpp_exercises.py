"""The C++ exercises (issue 15 §7): after writing a kernel in Python, the learner writes its Ascend C
listing; :func:`npu_lab.course.cpp_check.check_cpp` checks it. One per notebook 01, 05 and 06; the
solution listings are in ``npu_lab/course/cpp/``."""

from __future__ import annotations

from .cpp_check import CppExercise, register_cpp_exercise

register_cpp_exercise(CppExercise(
    id="01.scaled_add_cpp", title="the Ascend C of your scaled-add kernel",
    kernel_exercise="01.scaled_add_double_buffer", listing="01_scaled_add.cpp", entry="my_scaled_add",
    cell_name="my_scaled_add_cpp", python_name="my_scaled_add",
    # one core: n = 2500 is tiles of 1024, 1024 and 452 (452 floats are not whole 32-byte blocks:
    # the DataCopyPad branch), n = 2048 two whole tiles
    cases=({"n": 2500, "label": "n=2500"}, {"n": 2048, "label": "n=2048"}),
    place_after="the check of 01.scaled_add_double_buffer"))

register_cpp_exercise(CppExercise(
    id="05.prefetch_cpp", title="the Ascend C of your v2: the prefetch and CopyIn",
    kernel_exercise="05.prefetch", listing="05_moe_v2.cpp", entry="my_moe_v2",
    cell_name="my_moe_v2_cpp", python_name="my_moe_v2",
    # one core, S = 5 in tiles of 2: tiles of 2, 2, 1 points (the prefetch, a reused slot, a tail);
    # E = 12 float32 rows are 48 B (DataCopyPad), E = 16 are 64 B (DataCopy)
    cases=tuple({"B": 1, "S": 5, "E": e, "K": 2, "dtype": "float32", "tile_s": 2, "label": f"B=1, S=5, E={e}, K=2, tileS=2"}
                for e in (12, 16)),
    place_after="the check of 05.prefetch"))

register_cpp_exercise(CppExercise(
    id="06.gather_mask_cpp", title="the Ascend C of your pair splitter",
    kernel_exercise="06.gather_mask", listing="06_split_pairs.cpp", entry="my_split_pairs",
    cell_name="my_split_pairs_cpp", python_name="my_split_pairs",
    cases=({"rows": 100, "tile": 32, "label": "100 pairs, 32 a tile"}, {"rows": 7, "tile": 7, "label": "7 pairs, 7 a tile"}),
    cores=None, place_after="the check of 06.gather_mask"))

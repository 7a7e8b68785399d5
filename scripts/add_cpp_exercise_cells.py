"""Add the C++ exercises (issue 15 §7) to instructor notebooks 01, 05, 06, cell-locally and idempotently
(a notebook that has an exercise already is left alone): after the check cell of the Python kernel
exercise it mirrors, a markdown cell, the solution cell (cpp_solution_cell) and the check cell.
Run after a merge that lost the cells: python scripts/add_cpp_exercise_cells.py; then
python scripts/nbgrader_metadata.py instructor/0[156]_*.ipynb."""
import sys
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from npu_lab.course.cpp_check import cpp_exercises, cpp_solution_cell  # noqa: E402
from npu_lab.course.kernel_check import kernel_solution_cell  # noqa: E402

PROSE = {
    "01.scaled_add_cpp": (
        "**Exercise 01.scaled_add_cpp — the same kernel in Ascend C.** On a device your kernel is C++. Below is "
        "`my_scaled_add` as the Ascend C listing an operator project would write: the tiling struct registered with "
        "`REGISTER_TILING_DEFAULT` before `GET_TILING_DATA`, an entry that takes only GM addresses and ends in "
        "`workspace, tiling` (α travels in the tiling struct, which is why your kernel reads `t.alpha`), and the "
        "`TPipe` created in the entry and handed to the class by pointer. Fill in the `InitBuffer` lines and the "
        "bodies of `CopyIn`, `Compute` and `CopyOut`: the C++ calls of your Python, in the same order.\n\n"
        "`check_cpp` compiles your text against asc-devkit's real Ascend C headers for both chips (when they are "
        "installed: set `ASC_DEVKIT_DIR` to a clone of asc-devkit) and reports an error with your line; then it traces "
        "a small run of *your* `my_scaled_add` and checks that the C++ makes the same calls, call for call — queue "
        "calls included. Without the headers it says so and still checks the order."),
    "05.prefetch_cpp": (
        "**Exercise 05.prefetch_cpp — your v2 in Ascend C.** The listing of `my_moe_v2`: the tiling struct, the "
        "helpers and the scalar heap routine are given (a `// scalar: ...` comment marks the statement your Python "
        "charges with `ctx.scalar`), and so are `Compute` and `CopyOut` with their flags. Write the prefetch in "
        "`Process` and the body of `CopyIn`, where your Python has them: the `WaitFlag<HardEvent::S_MTE2>` before a "
        "slot is refilled, one copy per point, the `SetFlag<HardEvent::MTE2_S>` that lets the scalar unit read it.\n\n"
        "`check_cpp` compiles it against the headers (for the 910B2: v2 stores with `DataCopyPad`, which the 310P3 "
        "does not have) and checks its calls and flags against a traced run of your `my_moe_v2` on one core, where "
        "one block loops over three tiles."),
    "06.gather_mask_cpp": (
        "**Exercise 06.gather_mask_cpp — the pair splitter in Ascend C.** The listing of `my_split_pairs`, with the "
        "copy-in and copy-out given: write the two `GatherMask` calls. The C++ `GatherMask` takes one argument more "
        "than the Python: `rsvdCnt`, a `uint64_t` it writes the number of kept elements to (the Python call returns "
        "it). `check_cpp` compiles it against the headers — a wrong argument count or type is reported on your line "
        "— and checks its calls against a traced run of your `my_split_pairs`."),
}
AFTER = {"01.scaled_add_cpp": '"01.scaled_add_double_buffer"', "05.prefetch_cpp": '"05.prefetch"',
         "06.gather_mask_cpp": '"06.gather_mask"'}
NOTEBOOK = {"01": "instructor/01_hardware_model.ipynb", "05": "instructor/05_double_buffering.ipynb",
            "06": "instructor/06_vectorization.ipynb"}


def check_cell(ex) -> str:
    # check_cpp is imported in the notebook's setup cell (the grader binds checks from the setup only)
    return (f"result = check_cpp({ex.cell_name}, \"{ex.id}\", {ex.python_name})\nprint(result)\n"
            "### BEGIN HIDDEN TESTS\nassert result.correct\n### END HIDDEN TESTS")


def main():
    for eid, ex in cpp_exercises().items():
        path = REPO / NOTEBOOK[eid[:2]]
        nb = nbformat.read(path, as_version=4)
        if any(f'"{eid}"' in c.source for c in nb.cells):
            print(f"{path.name}: {eid} already there")
            continue
        at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "check_kernel(" in c.source
                  and AFTER[eid] in c.source)
        if eid == "01.scaled_add_cpp":     # the Python exercise's signature changed (alpha in the tiling)
            kid = "01.scaled_add_double_buffer"
            first = nb.cells[at - 1].source.splitlines()[0]
            nb.cells[at - 1].source = first + "\n" + kernel_solution_cell(kid).rstrip("\n")
        new = [nbformat.v4.new_markdown_cell(PROSE[eid]),
               nbformat.v4.new_code_cell(cpp_solution_cell(eid).rstrip("\n")),
               nbformat.v4.new_code_cell(check_cell(ex))]
        nb.cells[at + 1:at + 1] = new
        nbformat.write(nb, path)
        print(f"{path.name}: {eid} after cell {at}")


if __name__ == "__main__":
    main()

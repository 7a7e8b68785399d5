"""kernel_view.show_kernel: a course kernel's Python beside its Ascend C, small enough for a notebook."""

from __future__ import annotations

import pytest

from npu_lab.course.kernel_view import KERNELS, kernel_names, show_kernel
from npu_lab.kernels.scaled_add import scaled_add_kernel


@pytest.mark.parametrize("name", kernel_names())
def test_every_course_kernel_renders_small(name):
    view = show_kernel(name)
    page = view._repr_html_()
    assert "def " in view.python and view.name == name
    assert len(page) < 100 * 1024, "a notebook's HTML output must stay under 100 KB"
    assert repr(view).startswith(f"show_kernel({name!r})")


def test_python_and_cpp_side_by_side_with_calls_marked():
    view = show_kernel("scaled_add")
    assert view.cpp is not None and "DataCopy" in view.cpp and view.cpp_from.endswith(".cpp")
    page = view._repr_html_()
    assert page.count('style="flex:1 1 0') == 2                      # two columns
    assert "<b>data_copy</b>" in page and "<b>DataCopy</b>" in page   # the same call, both sides
    assert "&lt;" in page or "<" not in view.cpp                      # C++ text is escaped


def test_thin_wrappers_show_what_they_delegate_to():
    # v2 is a one-line call of the shared looping kernel: the view shows that kernel too
    assert "def _looping_scalar_kernel" in show_kernel("v2").python


def test_a_kernel_function_works_and_bad_names_explain():
    assert "scaled_add_kernel" in show_kernel(scaled_add_kernel).python
    with pytest.raises(ValueError, match="show_kernel knows"):
        show_kernel("v9")
    with pytest.raises(TypeError):
        show_kernel(3)
    assert set(KERNELS) >= {"scaled_add", "v1", "v2", "v2c", "v3", "v4", "discrete"}

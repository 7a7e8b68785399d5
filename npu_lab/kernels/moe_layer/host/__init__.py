"""The host side in full (issue 20 §4b): the ACL program that runs the fused gating kernel, and a syntax check of it.

``moe_gating_main.cc`` is the C++ host program (aclInit, aclrtMalloc, aclrtMemcpy of the inputs and of the
tiling struct, the ``<<<blockDim, l2ctrl, stream>>>`` launch, aclrtSynchronizeStream, copies back, frees),
as asc-devkit's examples write theirs; :func:`host_program` returns its text.

:func:`check_host_program` compiles it with ``g++ -fsyntax-only`` against **stand-in** declarations of the
ACL calls it uses (:data:`ACL_STAND_IN`: the signatures of CANN's AscendCL reference, ``aclrtMalloc(void**,
size_t, aclrtMemMallocPolicy)`` and so on -- written here, since asc-devkit ships no ``acl/acl.h``). What is
checked: the program's own C++ (types, calls, argument counts against those declarations). What is not: the
real ``acl.h``, and the launch line, whose ``<<<...>>>`` is bisheng's syntax -- it is rewritten to an ordinary
call ``name_launch(blockDim, l2ctrl, stream, args...)`` declared with the kernel's own parameters, so its
arguments are checked against the kernel's declaration, its syntax is not.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["ACL_STAND_IN", "HOST_PROGRAM", "check_host_program", "host_program"]

HOST_PROGRAM = Path(__file__).resolve().parent / "moe_gating_main.cc"

#: declarations of the ACL calls the host program makes (AscendCL API reference signatures)
ACL_STAND_IN = """#pragma once
#include <cstddef>
#include <cstdint>
typedef int aclError;
typedef void* aclrtStream;
typedef enum { ACL_MEM_MALLOC_HUGE_FIRST, ACL_MEM_MALLOC_HUGE_ONLY, ACL_MEM_MALLOC_NORMAL_ONLY } aclrtMemMallocPolicy;
typedef enum { ACL_MEMCPY_HOST_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST,
               ACL_MEMCPY_DEVICE_TO_DEVICE } aclrtMemcpyKind;
static const aclError ACL_SUCCESS = 0;
aclError aclInit(const char* configPath);
aclError aclFinalize();
aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtCreateStream(aclrtStream* stream);
aclError aclrtDestroyStream(aclrtStream stream);
aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtFree(void* devPtr);
aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind);
aclError aclrtSynchronizeStream(aclrtStream stream);
"""

_LAUNCH = re.compile(r"(\w+)<<<([^>]*)>>>\(")


def host_program() -> str:
    """The C++ text of the host program."""
    return HOST_PROGRAM.read_text(encoding="utf-8")


def check_host_program(text: str | None = None) -> list[str]:
    """g++ -fsyntax-only of the host program (or ``text``) against :data:`ACL_STAND_IN`; returns the error
    lines ("line N: message"), [] when it compiles. Raises RuntimeError when g++ is not installed."""
    gxx = shutil.which("g++")
    if gxx is None:
        raise RuntimeError("g++ is not installed: the host program's syntax check needs it (apt install g++)")
    src = host_program() if text is None else text
    launches = _LAUNCH.findall(src)
    # the launch's <<<blockDim, l2ctrl, stream>>> is bisheng's: check its arguments as an ordinary call
    src = _LAUNCH.sub(lambda m: f"{m.group(1)}_launch({m.group(2)}, ", src)
    decls = ""
    for name, _ in launches:      # the kernel's own parameters, from its extern "C" declaration
        m = re.search(r'extern\s+"C"\s+void\s+' + name + r"\s*\(([^)]*)\)", src)
        if m is None:
            return [f"the launch of {name} has no extern \"C\" declaration of the kernel above it"]
        decls += f"void {name}_launch(uint32_t, void*, aclrtStream, {m.group(1)});\n"
    src = src.replace('#include "acl/acl.h"', '#include "acl/acl.h"\n' + decls.replace("\n", " "), 1)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "acl").mkdir()
        (Path(tmp) / "acl" / "acl.h").write_text(ACL_STAND_IN, encoding="utf-8")
        path = Path(tmp) / "main.cc"
        path.write_text(src, encoding="utf-8")
        run = subprocess.run([gxx, "-std=c++17", "-fsyntax-only", "-I", tmp, str(path)], capture_output=True,
                             text=True, timeout=120)
    errors = []
    for line in run.stderr.splitlines():
        m = re.match(r".*main\.cc:(\d+):\d+: error: (.*)", line)
        if m:
            errors.append(f"line {m.group(1)}: {m.group(2)}")
    if run.returncode and not errors:
        errors.append(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "g++ failed")
    return errors

"""A seccomp filter that lets a process start threads but no other process: `forbid_new_processes`.

The score sandboxes run candidate code (the model), and their bound counts the CPU seconds of
what they run (harness.runner.scoring.score_budget). A process that makes children can hide work in them:
children that are reaped at once (SIGCHLD ignored, or a subreaper that waits) take their CPU time
with them, where sampling live processes never sees it. A model has no reason to start a process
while it is scored, so the score sandbox's entry installs this filter before any candidate code
runs (and before the libraries it preloads), for every thread of the process and everything it
may ever start:

- `fork` and `vfork`: EPERM;
- `clone` without CLONE_THREAD: EPERM (a thread shares the process: CLONE_THREAD needs CLONE_VM);
- `clone3`: ENOSYS, which makes the C library fall back to `clone` for threads (its arguments lie
  in memory, where a filter cannot read them);
- a system call of another ABI (x32 on x86_64, 32-bit entry points): ENOSYS, so no other numbering
  can slip past the list.

`os.fork`, `subprocess`, `multiprocessing` and `os.posix_spawn` therefore fail with an error,
while `threading` and torch's own threads work as before. The filter is the kernel's: once set it
cannot be removed by the process or its threads (no_new_privs is set with it).

Only x86_64 and aarch64 are known here; elsewhere `forbid_new_processes` raises, and the harness
says so rather than scoring without the filter.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
NR_OFFSET, ARCH_OFFSET, ARG0_LOW_OFFSET = 0, 4, 16  # args[0]'s low word on a little-endian CPU
# Classic BPF opcodes (linux/filter.h)
LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
JUMP_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JUMP_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
JUMP_ANY_BIT = 0x45  # BPF_JMP | BPF_JSET | BPF_K
RETURN = 0x06  # BPF_RET | BPF_K
# Filter verdicts (linux/seccomp.h)
ALLOW = 0x7FFF0000
ERRNO = 0x00050000
CLONE_THREAD = 0x00010000
X32_SYSCALL_BIT = 0x40000000
# prctl and seccomp(2)
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1


@dataclass(frozen=True)
class Abi:
    """One architecture's audit number and the system calls that make a process or a thread."""

    audit_arch: int
    seccomp: int  # the seccomp(2) system call itself
    clone: int
    clone3: int
    forks: tuple[int, ...]  # fork and vfork, where the architecture has them


ABIS = {
    "x86_64": Abi(audit_arch=0xC000003E, seccomp=317, clone=56, clone3=435, forks=(57, 58)),
    "aarch64": Abi(audit_arch=0xC00000B7, seccomp=277, clone=220, clone3=435, forks=()),
}


class FilterUnavailableError(RuntimeError):
    """This machine's architecture or kernel cannot take the filter."""


def instruction(code: int, jump_true: int = 0, jump_false: int = 0, value: int = 0) -> bytes:
    return struct.pack("HBBI", code, jump_true, jump_false, value)


def program(abi: Abi) -> list[bytes]:
    """The filter for `abi`, as classic BPF instructions (jumps count the instructions skipped)."""
    deny, no_such_call = ERRNO | errno.EPERM, ERRNO | errno.ENOSYS
    checks = [
        instruction(LOAD_WORD, value=ARCH_OFFSET),
        instruction(JUMP_EQUAL, 1, 0, abi.audit_arch),
        instruction(RETURN, value=no_such_call),  # another ABI's numbering
        instruction(LOAD_WORD, value=NR_OFFSET),
        instruction(JUMP_AT_LEAST, 0, 1, X32_SYSCALL_BIT),
        instruction(RETURN, value=no_such_call),
        instruction(JUMP_EQUAL, 0, 1, abi.clone3),
        instruction(RETURN, value=no_such_call),
    ]
    for number in abi.forks:
        checks += [instruction(JUMP_EQUAL, 0, 1, number), instruction(RETURN, value=deny)]
    return [
        *checks,
        instruction(JUMP_EQUAL, 1, 0, abi.clone),
        instruction(RETURN, value=ALLOW),  # any other system call
        instruction(LOAD_WORD, value=ARG0_LOW_OFFSET),  # clone's flags
        instruction(JUMP_ANY_BIT, 0, 1, CLONE_THREAD),
        instruction(RETURN, value=ALLOW),
        instruction(RETURN, value=deny),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def forbid_new_processes() -> None:
    """Install the filter on every thread of this process, for good. FilterUnavailableError where
    it cannot be (an unknown architecture, a kernel without seccomp filters)."""
    abi = ABIS.get(platform.machine())
    if abi is None:
        raise FilterUnavailableError(
            f"no process filter for the {platform.machine()} architecture (known: {', '.join(ABIS)})"
        )
    code = b"".join(program(abi))
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = SockFprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise FilterUnavailableError(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
    flags = SECCOMP_FILTER_FLAG_TSYNC
    if libc.syscall(abi.seccomp, SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(fprog)) != 0:
        raise FilterUnavailableError(f"seccomp(SET_MODE_FILTER): {os.strerror(ctypes.get_errno())}")

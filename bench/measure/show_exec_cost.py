#!/usr/bin/env python3
# What a warm Python child's _show_exec (jail/zygote.py) costs: a page of its own
# for the run's environment, the copy, and PR_SET_MM_MAP, timed over 1,000 calls
# in this process (each call maps a fresh page, as a child does once):
#   python3 bench/measure/show_exec_cost.py
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
class M(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in "start_code end_code start_data end_data start_brk brk start_stack arg_start arg_end env_start env_end".split()] + [("auxv", ctypes.c_void_p), ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]
f = [int(v) for v in open('/proc/self/stat','rb').read().rsplit(b')',1)[1].split()[1:]]
m = M(start_code=f[22], end_code=f[23], start_stack=f[24], start_data=f[41], end_data=f[42], start_brk=f[43], arg_start=f[44], arg_end=f[45], exe_fd=0xffffffff)
auxv = open('/proc/self/auxv','rb').read()
words = (ctypes.c_uint64 * (len(auxv)//8)).from_buffer_copy(auxv)
m.auxv, m.auxv_size = ctypes.addressof(words), ctypes.sizeof(words)
mmap = libc.mmap; mmap.restype = ctypes.c_void_p; mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
sbrk = libc.sbrk; sbrk.restype = ctypes.c_void_p; sbrk.argtypes = (ctypes.c_long,)
prctl = libc.prctl; prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
block = b''.join(b'NAME%d=%s\0' % (i, b'v' * 40) for i in range(10))
N = 1000
t0 = time.process_time()
for _ in range(N):
    at = mmap(None, len(block), 3, 0x22, -1, 0)
    ctypes.memmove(at, block, len(block))
    m.env_start, m.env_end = at, at + len(block)
    m.brk = sbrk(0)
    r = prctl(35, 14, ctypes.addressof(m), ctypes.sizeof(m), 0)
    assert r == 0, ctypes.get_errno()
t1 = time.process_time()
print('%.1f us of CPU a call' % ((t1 - t0) / N * 1e6))

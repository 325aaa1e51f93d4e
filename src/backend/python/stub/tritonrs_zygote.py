"""The fork server of the tritonrs Python stubs (the "zygote").

It imports the interpreter's expensive part once: numpy, triton_python_backend_utils and the stub
itself. Every stub is then a fork of it, so the stubs share those pages copy-on-write instead of each
holding its own copy (gc.freeze() keeps the collector from touching, and so copying, the objects
imported here).

Protocol, on fd 0 (a SOCK_SEQPACKET socket from the server; one message per packet):
  zygote -> server  {"ready": true}
  server -> zygote  {"argv": [...], "path": [...], "env": {...}}   with SCM_RIGHTS [stub socket, stderr]
  zygote -> server  {"pid": N}  or  {"error": "..."}
The child makes the stub socket its fd 0 and the stderr descriptor its fd 2, takes its own process
group, adds the paths and variables, and runs the stub's main(), exactly what `python3
tritonrs_stub.py ... PATH...` (the command line in "argv") would have done. It also shows that
command line as its own (set_title), so that `ps` tells which model and instance each stub serves
rather than showing the fork server's command line for every stub. The zygote exits when the server closes its socket; its
children are reaped by the kernel (SIGCHLD ignored), and the server watches each through its socket.
"""

import ctypes
import gc
import json
import os
import signal
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tritonrs_stub  # noqa: E402  (imports numpy and triton_python_backend_utils)


def _fds(anc):
    out = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            n = len(data) // 4
            out.extend(struct.unpack_from(f"{n}i", data))
    return out


# Copies that set_title hands to libc, kept alive for the life of the process.
_KEEP = []


def set_title(argv):
    """Makes this process's command line (/proc/<pid>/cmdline, what `ps`, `top` and `pgrep -f` read)
    `argv` joined by spaces, as setproctitle(3) does: Linux reads the command line from the memory
    where exec placed the original argument strings, [arg_start, arg_end) in /proc/self/stat, so we
    write the title there. When the last byte of that area is not NUL, Linux reads a single string up
    to its first NUL, and lets it run on into the environment strings that follow it; when the title
    needs that room, the environment is first copied to the heap for libc (`environ`). Called in a
    freshly forked child (one thread), before anything else may read those strings. Returns why it
    could not, or None."""
    title = b" ".join(os.fsencode(a) for a in argv)
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        # proc(5) fields 48 to 51 (Linux 3.5+); `fields` starts at field 3.
        arg_start, arg_end, env_start, env_end = (int(x) for x in fields[45:49])
        with open("/proc/self/cmdline", "rb") as f:
            cmdline = f.read()
        with open("/proc/self/environ", "rb") as f:
            environ_bytes = f.read()
    except (OSError, ValueError) as e:
        return f"cannot read /proc/self: {e}"
    # The addresses must hold exactly what the kernel shows there, or nothing is written.
    if not 0 < arg_start < arg_end or ctypes.string_at(arg_start, arg_end - arg_start) != cmdline:
        return "the argument strings are not where /proc/self/stat says"
    end = arg_end
    room_in_env = (env_start == arg_end < env_end
                   and ctypes.string_at(env_start, env_end - env_start) == environ_bytes)
    if len(title) >= arg_end - arg_start and room_in_env:
        libc = ctypes.CDLL(None)
        env_ptr = ctypes.c_void_p.in_dll(libc, "environ")
        entries = []
        if env_ptr.value:
            strings = ctypes.cast(env_ptr.value, ctypes.POINTER(ctypes.c_char_p))
            while strings[len(entries)] is not None:
                entries.append(strings[len(entries)])
        # The array keeps its bytes objects (heap copies) alive; _KEEP keeps the array.
        table = (ctypes.c_char_p * (len(entries) + 1))(*entries, None)
        _KEEP.append(table)
        env_ptr.value = ctypes.addressof(table)
        end = env_end
    # glibc's program_invocation_name (used in libc's own messages) points at argv[0]: give it a copy.
    try:
        libc = ctypes.CDLL(None)
        for name in ("program_invocation_name", "program_invocation_short_name"):
            ptr = ctypes.c_char_p.in_dll(libc, name)
            if ptr.value is not None:
                copy = ctypes.create_string_buffer(ptr.value)
                _KEEP.append(copy)
                ctypes.c_void_p.in_dll(libc, name).value = ctypes.addressof(copy)
    except ValueError:  # not glibc
        pass
    size = end - arg_start
    text = title[:size - 1]
    ctypes.memmove(arg_start, text + b"\0" * (size - len(text)), size)
    if len(text) < arg_end - arg_start - 1:
        # A title shorter than the area: a non-NUL last byte makes Linux stop at the title's NUL.
        ctypes.memset(arg_end - 1, 0x20, 1)
    return None


def _child(ctl, req, fds):
    try:
        ctl.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setpgid(0, 0)
        os.dup2(fds[0], 0)
        os.dup2(fds[1], 2)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.environ.update({str(k): str(v) for k, v in req.get("env", {}).items()})
        paths = [str(p) for p in req.get("path", [])]
        for p in paths:
            if p not in sys.path:
                sys.path.append(p)
        argv = [str(a) for a in req.get("argv", [])]
        sys.argv = argv[1:] or [tritonrs_stub.__file__, *paths]
        if argv:
            why = set_title(argv)
            if why:
                print(f"tritonrs: the stub keeps the fork server's command line: {why}", file=sys.stderr)
        tritonrs_stub.main()
    except BaseException:  # noqa: BLE001 - the child must never return into the zygote's loop
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    os._exit(1)


def main():
    ctl = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    # Children are reaped by the kernel; the server learns of a death from the stub's socket.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    # A Ctrl-C meant for the server is not for us: the server closes our socket when it goes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()
    ctl.send(b'{"ready": true}')
    while True:
        try:
            msg, anc, _, _ = ctl.recvmsg(1 << 16, socket.CMSG_SPACE(8 * 4))
        except InterruptedError:
            continue
        if not msg:
            return
        fds = _fds(anc)
        try:
            req = json.loads(msg)
            if len(fds) != 2:
                raise ValueError(f"expected 2 descriptors, got {len(fds)}")
            pid = os.fork()
            if pid == 0:
                _child(ctl, req, fds)
            reply = {"pid": pid}
        except Exception as e:  # noqa: BLE001 - answered to the server
            reply = {"error": f"{type(e).__name__}: {e}"}
        for fd in fds:
            os.close(fd)
        ctl.send(json.dumps(reply).encode())


if __name__ == "__main__":
    main()

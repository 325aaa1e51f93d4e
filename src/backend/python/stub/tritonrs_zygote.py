"""The fork server of the tritonrs Python stubs (the "zygote").

It imports the interpreter's expensive part once: numpy, triton_python_backend_utils and the stub
itself. Every stub is then a fork of it, so the stubs share those pages copy-on-write instead of each
holding its own copy (gc.freeze() keeps the collector from touching, and so copying, the objects
imported here).

Protocol, on fd 0 (a SOCK_SEQPACKET socket from the server; one message per packet):
  zygote -> server  {"ready": true}
  server -> zygote  {"path": [...], "env": {...}}   with SCM_RIGHTS [stub socket, stderr]
  zygote -> server  {"pid": N}  or  {"error": "..."}
The child makes the stub socket its fd 0 and the stderr descriptor its fd 2, takes its own process
group, adds the paths and variables, and runs the stub's main(), exactly what `python3
tritonrs_stub.py PATH...` would have done. The zygote exits when the server closes its socket; its
children are reaped by the kernel (SIGCHLD ignored), and the server watches each through its socket.
"""

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
        sys.argv = [tritonrs_stub.__file__, *paths]
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

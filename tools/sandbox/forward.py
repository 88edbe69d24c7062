"""Inside the sandbox, allow-list mode: 127.0.0.1:PORT forwarded to the host's proxy socket.

Run by the launcher (after bubblewrap, before the command's confinement, so its own AF_UNIX
connect is not refused by the command's seccomp filter) as a child of its own: the command's
HTTP(S)_PROXY points here. The sandbox's network namespace has nothing but loopback, so this
is its only way out, and the host's proxy (proxy.py) decides where that leads. The listening
socket is bound before the command starts, so its first request never races the forwarder.
"""

import os
import socket
import threading


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (dst, src):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _handle(conn: socket.socket, path: str) -> None:
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.connect(path)
    except OSError:
        conn.close()
        up.close()
        return
    t = threading.Thread(target=_pump, args=(up, conn), daemon=True)
    t.start()
    _pump(conn, up)
    t.join()
    conn.close()
    up.close()


def start(port: int, path: str) -> int:
    """Bind 127.0.0.1:port, fork the forwarder, return its pid (the caller goes on)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(64)
    pid = os.fork()
    if pid:
        srv.close()
        return pid
    try:
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=_handle, args=(conn, path), daemon=True).start()
    finally:
        os._exit(0)

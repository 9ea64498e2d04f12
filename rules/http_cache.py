"""A Bazel HTTP remote cache on this machine: nginx serving a folder with WebDAV PUT.

Bazel's HTTP cache protocol is plain GET and PUT of ``/ac/<sha256>`` (action results) and
``/cas/<sha256>`` (file contents), a miss being a 404: nginx's own ``ngx_http_dav_module``
(built into Debian's ``nginx`` package) serves exactly that. For trying the rules'
``--remote_cache`` locally, and for tests/e2e/test_bazel.py::test_second_checkout_from_remote_cache.

    python rules/http_cache.py FOLDER [--port 9090]     # runs until Ctrl-C
    bazel build //:wheel --remote_cache=http://127.0.0.1:9090

A team's cache is a server of its own (bazel-remote, nginx as here, a cloud bucket); this
one has no authentication and listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

_CONFIG = """\
{user}worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log {root}/access.log;
    client_body_temp_path {root}/tmp/body;
    proxy_temp_path {root}/tmp/proxy;
    fastcgi_temp_path {root}/tmp/fastcgi;
    uwsgi_temp_path {root}/tmp/uwsgi;
    scgi_temp_path {root}/tmp/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root}/store;
        client_max_body_size 0;
        location / {{
            dav_methods PUT;
            create_full_put_path on;
            dav_access user:rw;
        }}
    }}
}}
"""


def nginx_binary() -> str | None:
    """Debian installs nginx in /usr/sbin, which a normal user's PATH may lack."""
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpCache:
    """An nginx process serving ``root/store`` on 127.0.0.1; stop() (or leaving the ``with``
    block) ends it. Its files: ``root/{nginx.conf,error.log,access.log,store/}``."""

    def __init__(self, root: Path, port: int = 0) -> None:
        self.root = root.absolute()
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20) -> HttpCache:
        nginx = nginx_binary()
        if nginx is None:
            raise FileNotFoundError("nginx is not installed (Debian/Ubuntu: apt-get install nginx)")
        for sub in ("store/ac", "store/cas", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        fixed = self.port
        for _ in range(5):  # a free port can be taken between the probe and nginx's bind
            self.port = fixed or _free_port()
            # As root, nginx's workers would run as "nobody" and could not write the store.
            user = f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""
            conf = self.root / "nginx.conf"
            conf.write_text(_CONFIG.format(user=user, root=self.root, port=self.port))
            self.proc = subprocess.Popen(
                [nginx, "-p", str(self.root), "-e", str(self.root / "error.log"), "-c", str(conf)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return self
                except OSError:
                    time.sleep(0.05)
            self.stop()
            if fixed:
                break
        error_log = self.root / "error.log"
        log = error_log.read_text(errors="replace") if error_log.exists() else ""
        raise RuntimeError(f"nginx did not start serving {self.root / 'store'} on 127.0.0.1:\n{log}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: finishes the requests under way
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def requests(self) -> list[tuple[str, str, int]]:
        """(method, path, status) of every request served so far (nginx's access log)."""
        out = []
        log = self.root / "access.log"
        for line in log.read_text().splitlines() if log.exists() else []:
            try:
                request = line.split('"')[1]
                status = int(line.split('"')[2].split()[0])
            except (IndexError, ValueError):
                continue
            method, _, rest = request.partition(" ")
            out.append((method, rest.rpartition(" ")[0], status))
        return out

    def __enter__(self) -> HttpCache:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path, help="where the cache's files and nginx's logs go")
    parser.add_argument("--port", type=int, default=9090)
    a = parser.parse_args()

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM stops nginx too, as Ctrl-C does

    signal.signal(signal.SIGTERM, interrupt)
    with HttpCache(a.folder, a.port) as cache:
        print(f"serving {cache.root / 'store'}: bazel build ... --remote_cache={cache.url}", flush=True)
        try:
            assert cache.proc is not None
            cache.proc.wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()

"""An intruder, run by tests/test_dask_security.py as another user id: tries to reach a
Dask cluster's scheduler, workers and nannies (plain TCP, and TLS with credentials of its
own), to run code on the workers (``os.getuid``), to get past TLS without checking the
server's certificate (with no client certificate, and with one of its own), and to read
the cluster's HTTP routes; prints what it got as JSON: what it reached, or the error that
stopped it.

Usage: python _dask_intruder.py '{"scheduler": ADDRESS, "servers": [ADDRESS, ...],
"http": [PORT, ...]}'
"""

import json
import os
import sys
import tempfile
import urllib.error
import urllib.request


def _attempts():
    from distributed.security import Security

    return (("tcp", None), ("tls", Security.temporary()))


def run_on_workers(scheduler):
    import distributed

    out = {}
    host_port = scheduler.split("://")[1]
    for proto, security in _attempts():
        try:
            with distributed.Client(f"{proto}://{host_port}", security=security, timeout="5s",
                                    set_as_default=False) as c:
                out[proto] = sorted(set(c.run(os.getuid).values()))  # the workers' user ids
        except Exception as e:
            out[proto] = type(e).__name__
    return out


def identify(servers):
    from distributed.core import rpc
    from distributed.utils import LoopRunner, sync

    out = {}
    runner = LoopRunner(asynchronous=False)
    runner.start()
    try:
        for address in servers:
            host_port = address.split("://")[1]
            for proto, security in _attempts():
                args = security.get_connection_args("client") if security else {}

                async def ask():
                    async with rpc(f"{proto}://{host_port}", connection_args=args, timeout=5) as r:
                        return (await r.identity())["type"]

                try:
                    out[f"{proto}://{host_port}"] = sync(runner.loop, ask)
                except Exception as e:
                    out[f"{proto}://{host_port}"] = type(e).__name__
    finally:
        runner.stop()
    return out


def past_tls(servers, folder, own=None):
    """A bare TLS connection that trusts any server: "accepted" if the server, done with
    the handshake, sends its first Dask message (which it does before reading one).
    ``own``: the ``Security`` whose client certificate to try (new ones by default)."""
    import socket
    import ssl

    from distributed.security import Security

    own = own or Security.temporary()
    with open(os.path.join(folder, "own.pem"), "w") as f:
        f.write(own.tls_client_key + own.tls_client_cert)
    out = {}
    for address in servers:
        host, port = address.split("://")[1].rsplit(":", 1)
        for name, cert in (("no certificate", None), ("own certificate", f.name)):
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            if cert:
                ctx.load_cert_chain(cert)
            try:
                with socket.create_connection((host, int(port)), timeout=5) as raw, \
                        ctx.wrap_socket(raw) as conn:
                    out[f"{address} {name}"] = "accepted" if conn.recv(1) else "closed"
            except Exception as e:
                out[f"{address} {name}"] = type(e).__name__
    return out


def read_http(ports):
    out = {}
    for port in ports:
        for path in ("/health", "/info/main/workers.html", "/json/identity.json", "/metrics"):
            try:
                status = urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).status
            except urllib.error.HTTPError as e:
                status = e.code
            except Exception as e:
                status = type(e).__name__
            out[f"{port}{path}"] = status
    return out


if __name__ == "__main__":
    targets = json.loads(sys.argv[1])
    print(json.dumps({
        "uid": os.getuid(),
        "scheduler": run_on_workers(targets["scheduler"]),
        "servers": identify(targets["servers"]),
        "past_tls": past_tls(targets["servers"], tempfile.mkdtemp()) if targets.get("tls") else {},
        "http": read_http(targets["http"]),
    }))

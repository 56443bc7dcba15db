"""tenure's EC2 test server: moto's server, with the EC2 semantics tenure's tests rely on.

A TEST AID, never a production component. tenure's AWS executor is tested against moto's EC2
server (PyPI moto[server], pinned in scripts/moto-server) because it is an implementation of the
EC2 API that no one here wrote. moto lacks two behaviours of real EC2 that the executor's safety
argument depends on, so this module adds them, narrowly, and adds two test controls:

  (a) AssignPrivateIpAddresses with AllowReassignment=true MOVES the address. Real EC2 takes a
      secondary private IPv4 address off whichever network interface in the VPC held it; moto
      leaves it on both, so a "seize" would look like two holders. Patched: after moto's own
      assign, the address is removed from the secondary addresses of every other ENI in the
      same VPC (a primary address is left alone: EC2 refuses to reassign one; not modelled).
  (b) DescribeNetworkInterfaces filters `private-ip-address` and `addresses.private-ip-address`
      match every private IPv4 address of an ENI, secondary ones included, as EC2 does; moto
      matches only the primary one, so "which ENI holds 10.0.0.10" finds nothing. Patched: the
      two filters are taken out of moto's filter set and applied here (any address of the ENI
      matches any value, with EC2's `*`/`?` wildcards); the other filters stay moto's.
  (c) Fault injection, over HTTP on the same server, for retry and permission tests:
        POST   /_tenure/faults  {"action": "AssignPrivateIpAddresses", "throttle": 2}
               the next 2 such calls answer HTTP 503 RequestLimitExceeded (EC2's throttling
               answer); optional "status" (e.g. 429 or 500), "code" (e.g. "InternalError") and
               "message" change the injected error;
        POST   /_tenure/faults  {"action": "...", "unauthorized": true}
               every such call answers HTTP 403 UnauthorizedOperation until cleared
               ({"action": "...", "unauthorized": false} or DELETE);
        GET    /_tenure/faults  the faults in force;  DELETE /_tenure/faults clears them all.
      "action": "*" applies to every action. Errors have EC2's shape:
        <Response><Errors><Error><Code>..</Code><Message>..</Message></Error></Errors>
        <RequestID>..</RequestID></Response>
  (d) Per-action call counters, so a test can count calls AT THE SERVER (a fenced call must
      not arrive at all): GET /_tenure/calls -> {"AssignPrivateIpAddresses": 3, ...}, every
      call that reached the server, injected failures included; DELETE /_tenure/calls resets.
      GET /_tenure/ping answers "ok".

Run by scripts/moto-server: `python tenure_moto_patch.py --port PORT [--plain]`. It binds
127.0.0.1 only and prints `moto listening on http://127.0.0.1:PORT` once the server answers an
HTTP request. `--plain` serves stock moto the same way, unpatched and without the /_tenure
endpoints, so a test can show moto's own behaviour (the reason the patches exist).
Requests are not logged unless TENURE_MOTO_LOG=1 (a test that never reads stderr must not
stall the server).
"""

import argparse
import fnmatch
import http.client
import io
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from urllib.parse import parse_qs

import moto
from moto.ec2.models.elastic_network_interfaces import NetworkInterfaceBackend
from moto.ec2.responses.elastic_network_interfaces import ElasticNetworkInterfaces
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

IP_FILTERS = ("private-ip-address", "addresses.private-ip-address")


def die(message):
    print(f"tenure_moto_patch: {message}", file=sys.stderr, flush=True)
    os._exit(1)


# ---- (a) AllowReassignment moves the address -------------------------------------------------


def patch_reassignment():
    original = ElasticNetworkInterfaces.assign_private_ip_addresses

    def assign_private_ip_addresses(self):
        result = original(self)  # moto's assign: validates the ENI, adds the addresses
        if self._get_bool_param("AllowReassignment", False):
            addresses = set(self._get_param("PrivateIpAddresses", []) or [])
            target = self.ec2_backend.get_network_interface(self._get_param("NetworkInterfaceId"))
            for eni in list(self.ec2_backend.enis.values()):
                if eni is target or eni.subnet.vpc_id != target.subnet.vpc_id:
                    continue
                for item in list(eni.private_ip_addresses):
                    if not item.get("Primary") and item.get("PrivateIpAddress") in addresses:
                        eni.private_ip_addresses.remove(item)
        return result

    ElasticNetworkInterfaces.assign_private_ip_addresses = assign_private_ip_addresses


# ---- (b) private-ip-address filters match secondary addresses --------------------------------


def eni_addresses(eni):
    found = {item.get("PrivateIpAddress") for item in eni.private_ip_addresses}
    found.add(eni.private_ip_address)
    found.discard(None)
    return found


def patch_ip_filters():
    original = NetworkInterfaceBackend.get_all_network_interfaces

    def get_all_network_interfaces(self, eni_ids=None, filters=None):
        filters = dict(filters or {})
        ours = {name: filters.pop(name) for name in IP_FILTERS if name in filters}
        enis = original(self, eni_ids, filters)
        for values in ours.values():
            values = values if isinstance(values, list) else [values]
            enis = [
                eni
                for eni in enis
                if any(fnmatch.fnmatchcase(a, v) for a in eni_addresses(eni) for v in values)
            ]
        return enis

    NetworkInterfaceBackend.get_all_network_interfaces = get_all_network_interfaces


def apply_patches():
    for owner, name in (
        (ElasticNetworkInterfaces, "assign_private_ip_addresses"),
        (NetworkInterfaceBackend, "get_all_network_interfaces"),
    ):
        if not callable(getattr(owner, name, None)):
            die(f"moto {moto.__version__} has no {owner.__name__}.{name}; update the patch")
    patch_reassignment()
    patch_ip_filters()


# ---- (c) fault injection and (d) call counters: a WSGI layer in front of moto ------------------


def ec2_error(status, code, message):
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error>"
        f"</Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()
    return status, "text/xml;charset=UTF-8", body


REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
           429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


class TenureLayer:
    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.calls = {}
        self.throttle = {}  # action -> [remaining, status, code, message]
        self.unauthorized = set()

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path.startswith("/_tenure/"):
            status, ctype, body = self.control(environ, path)
        else:
            action = self.action_of(environ)
            answer = self.fault_for(action) if action else None
            if answer is None:
                return self.app(environ, start_response)
            status, ctype, body = answer
        start_response(
            f"{status} {REASONS.get(status, 'Error')}",
            [("Content-Type", ctype), ("Content-Length", str(len(body)))],
        )
        return [body]

    @staticmethod
    def action_of(environ):
        """The query-protocol Action, from the query string or the form body (put back)."""
        query = parse_qs(environ.get("QUERY_STRING", ""))
        if "Action" in query:
            return query["Action"][0]
        if "x-www-form-urlencoded" not in environ.get("CONTENT_TYPE", ""):
            return None
        length = environ.get("CONTENT_LENGTH") or ""
        if length.isdigit():
            body = environ["wsgi.input"].read(int(length))
        elif environ.get("wsgi.input_terminated"):
            body = environ["wsgi.input"].read()
        else:
            return None
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        form = parse_qs(body.decode("utf-8", "replace"))
        return form["Action"][0] if "Action" in form else None

    def fault_for(self, action):
        with self.lock:
            self.calls[action] = self.calls.get(action, 0) + 1
            if action in self.unauthorized or "*" in self.unauthorized:
                return ec2_error(403, "UnauthorizedOperation",
                                 "You are not authorized to perform this operation. "
                                 f"(ec2:{action}; fault injected by tenure_moto_patch)")
            for key in (action, "*"):
                fault = self.throttle.get(key)
                if fault and fault[0] > 0:
                    fault[0] -= 1
                    if fault[0] == 0:
                        del self.throttle[key]
                    return ec2_error(fault[1], fault[2], fault[3])
        return None

    def control(self, environ, path):
        method = environ.get("REQUEST_METHOD", "GET")
        with self.lock:
            if path == "/_tenure/ping":
                return 200, "text/plain", b"ok"
            if path == "/_tenure/calls" and method == "GET":
                return self.json(dict(self.calls))
            if path == "/_tenure/calls" and method == "DELETE":
                self.calls.clear()
                return self.json({})
            if path == "/_tenure/faults" and method == "GET":
                return self.json(self.faults())
            if path == "/_tenure/faults" and method == "DELETE":
                self.throttle.clear()
                self.unauthorized.clear()
                return self.json(self.faults())
        if path == "/_tenure/faults" and method == "POST":
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
                spec = json.loads(environ["wsgi.input"].read(length) or b"{}")
                action = spec["action"]
                assert isinstance(action, str) and action
            except Exception:
                return self.json({"error": 'expected JSON {"action": "...", "throttle": N} '
                                           'or {"action": "...", "unauthorized": true|false}'}, 400)
            with self.lock:
                if "throttle" in spec:
                    count = int(spec["throttle"])
                    if count > 0:
                        self.throttle[action] = [
                            count,
                            int(spec.get("status", 503)),
                            str(spec.get("code", "RequestLimitExceeded")),
                            str(spec.get("message", "Request limit exceeded.")),
                        ]
                    else:
                        self.throttle.pop(action, None)
                if "unauthorized" in spec:
                    if spec["unauthorized"]:
                        self.unauthorized.add(action)
                    else:
                        self.unauthorized.discard(action)
                return self.json(self.faults())
        return self.json({"error": f"no such endpoint: {method} {path}"}, 404)

    def faults(self):
        return {
            "throttle": {a: {"remaining": f[0], "status": f[1], "code": f[2]}
                         for a, f in self.throttle.items()},
            "unauthorized": sorted(self.unauthorized),
        }

    @staticmethod
    def json(value, status=200):
        return status, "application/json", json.dumps(value, sort_keys=True).encode()


# ---- serving: moto's own app and request handler, bound to loopback ---------------------------


def announce_when_answering(port, timeout=30.0):
    """Prints the ready line once the server answers an HTTP request; exits the process if not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/moto-api/config")  # cheap; any HTTP answer means moto is up
            conn.getresponse().read()
            conn.close()
            print(f"moto listening on http://127.0.0.1:{port}", flush=True)
            return
        except OSError:
            time.sleep(0.05)
    die(f"the server on 127.0.0.1:{port} did not answer within {timeout:.0f}s")


def main():
    parser = argparse.ArgumentParser(description="moto's EC2 server for tenure's tests")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--plain", action="store_true", help="stock moto: no patches")
    args = parser.parse_args()

    os.environ.setdefault("MOTO_PORT", str(args.port))
    if os.environ.get("TENURE_MOTO_LOG") != "1":
        logging.getLogger("werkzeug").setLevel(logging.ERROR)

    app = DomainDispatcherApplication(create_backend_app)
    if not args.plain:
        apply_patches()
        app = TenureLayer(app)
    # The socket is bound here so that a taken port is one clear line (werkzeug prints more).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", args.port))
        sock.listen(128)
    except OSError as err:
        die(f"cannot listen on 127.0.0.1:{args.port}: {err.strerror or err}")
    server = make_server("127.0.0.1", args.port, app, threaded=True,
                         request_handler=MotoRequestHandler, fd=sock.fileno())
    threading.Thread(target=announce_when_answering, args=(args.port,), daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()

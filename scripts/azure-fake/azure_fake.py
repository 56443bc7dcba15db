#!/usr/bin/env python3
# A FAKE of the Azure Resource Manager network interface API, written from the published REST
# reference; not Azure.
#
# It serves the few Microsoft.Network calls tenure's `azure` provider makes (api-version
# 2024-05-01): NetworkInterfaces_Get, NetworkInterfaces_CreateOrUpdate (PUT, If-Match), the
# NetworkInterfaces_List of a resource group (paged by nextLink), and the Azure-AsyncOperation
# status of a PUT's long-running operation. It keeps stateful NICs with etags and ipConfigurations
# in subnets, and answers as the reference says:
#   - a PUT whose If-Match is not the NIC's etag: 412 PreconditionFailed;
#   - a static private IP another NIC of the subnet has: 400 PrivateIPAddressInUse;
#   - removing the primary ipConfiguration: 400 NicMustHaveAPrimaryIpConfiguration (the fake's code);
#   - a PUT: 200 with provisioningState Updating, Azure-AsyncOperation and Retry-After headers,
#     the operation InProgress for `lroDelayMs`, then Succeeded (`lroMode` below for the other
#     shapes); the NIC's provisioningState follows the operation's end whether or not anyone
#     polls (Updating until then; Failed when the operation failed, its requested configuration
#     left visible, as ARM does);
#   - a PUT while the NIC is Updating: 409 AnotherOperationInProgress with Retry-After;
#   - a static private IP another NIC of the subnet has: 400 PrivateIPAddressInUse, whose message
#     names the requesting ipConfiguration and then the holder's (`inUseNamesHolder: false`: none;
#     the exact wording of ARM's message is unverified, see docs/operations.md);
#   - no or another bearer token: 401.
# Test knobs (the `/_fake/...` admin API, no auth):
#   POST /_fake/nic      {"group","name","subnet","primary","secondary":[..],"ipForwarding"} make a NIC
#   POST /_fake/set      {"id", "secondary"?: [..], "ipForwarding"?}  change a NIC by hand (drift), etag bumped
#   POST /_fake/config   {"lroDelayMs","pollMs","staleGetMs","staleListMs","pageSize","inUseNamesHolder",
#                         "lroMode": async (200 + Azure-AsyncOperation) | location (202 + Location, polled
#                         until not 202) | resource (201/200 Updating, no link: the NIC is polled),
#                         "lroFail": n (the next n operations end Failed)}
#   POST /_fake/faults   {"op": get|put|list|poll|any, "nic": name?, "status", "code"?, "retryAfter"?, "count"}
#                        the next `count` matching calls answer `status` (429/500/409/403/…)
#   POST /_fake/hold     {"op": "put", "nic": name}  the next such PUT waits, unapplied, until released
#   POST /_fake/release  {"apply": false}            answer the held PUT 500, not applied (or apply it)
#   GET  /_fake/calls    every call: {"op","method","path","nic","t","status"} (t: time.time())
#   POST /_fake/reset-calls
#   GET  /_fake/state    {"nics": {id: {"addresses": [...], "etag", "ipForwarding", "provisioningState"}}, "held": n}
# Reads can lag writes (`staleGetMs`, `staleListMs`): a read shows the NIC as it was that long ago.
# Usage: azure_fake.py [--port N] [--token T]; prints "azure-fake listening on PORT" when ready.

import argparse
import copy
import json
import math
import re
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

API_VERSION = "2024-05-01"
NIC_RE = re.compile(
    r"^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft\.Network/networkInterfaces/([^/]+)$", re.I)
LIST_RE = re.compile(
    r"^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft\.Network/networkInterfaces$", re.I)
OP_RE = re.compile(
    r"^/subscriptions/([^/]+)/providers/Microsoft\.Network/locations/fake/(operations|operationResults)/([^/]+)$", re.I)

LOCK = threading.Lock()
HELD = threading.Condition(LOCK)
STATE = {
    "nics": {},  # lower(id) -> {"history": [(t, body, op)]}, op: None or the write's {"done_at", "final"}
    "ops": {},  # op id -> {"done_at", "nic", "final"}
    "config": {"lroDelayMs": 200, "pollMs": 100, "staleGetMs": 0, "staleListMs": 0, "pageSize": 50,
               "inUseNamesHolder": True, "lroMode": "async", "lroFail": 0},
    "faults": [],
    "calls": [],
    "hold": None,  # {"op", "nic"} armed
    "held": 0,
    "release": None,  # {"apply": bool} once released
    "etag": 0,
    "op_seq": 0,
}
TOKEN = "fake-token"


def now():
    return time.time()


def view(entry, at):
    """A history entry as read at time `at`: its provisioningState follows its operation's end."""
    _, body, op = entry
    if op is None:
        return body
    body = copy.deepcopy(body)
    body["properties"]["provisioningState"] = op["final"] if at >= op["done_at"] else "Updating"
    return body


def current(nic):
    return view(nic["history"][-1], now())


def seen(nic, stale_ms):
    """The NIC as a read `stale_ms` late sees it."""
    limit = now() - stale_ms / 1000.0
    entry = nic["history"][0]
    for e in nic["history"]:
        if e[0] <= limit:
            entry = e
    return view(entry, limit)


def next_etag():
    STATE["etag"] += 1
    return 'W/"%d"' % STATE["etag"]


def write(key, body, op=None):
    body = copy.deepcopy(body)
    body["etag"] = next_etag()
    STATE["nics"][key]["history"].append((now(), body, op))
    del STATE["nics"][key]["history"][:-20]
    return view((0, body, op), now())


def configs(body):
    return body.get("properties", {}).get("ipConfigurations", [])


def address_of(config):
    return config.get("properties", {}).get("privateIPAddress")


def subnet_of(config):
    return (config.get("properties", {}).get("subnet") or {}).get("id", "").lower()


def error(code, message):
    return {"error": {"code": code, "message": message}}


def make_nic(spec):
    sub = spec.get("subscription", "00000000-0000-0000-0000-000000000001")
    group, name = spec["group"], spec["name"]
    nic_id = "/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Network/networkInterfaces/%s" % (sub, group, name)
    subnet = spec["subnet"]
    ipcs = [{"name": "ipconfig1", "properties": {"primary": True, "privateIPAddress": spec["primary"],
                                                  "privateIPAllocationMethod": "Dynamic", "subnet": {"id": subnet}}}]
    for i, a in enumerate(spec.get("secondary", [])):
        ipcs.append({"name": "extra%d" % i, "properties": {"primary": False, "privateIPAddress": a,
                                                            "privateIPAllocationMethod": "Static", "subnet": {"id": subnet}}})
    body = {"id": nic_id, "name": name, "type": "Microsoft.Network/networkInterfaces", "location": "fakeregion",
            "etag": next_etag(),
            "properties": {"provisioningState": "Succeeded", "enableIPForwarding": bool(spec.get("ipForwarding")),
                           "ipConfigurations": ipcs}}
    STATE["nics"][nic_id.lower()] = {"history": [(0.0, body, None)]}
    return nic_id


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Headers and body go out in two writes: without this, Nagle's algorithm holds the body
        # until the client's delayed ACK (40 ms a request).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def answer(self, status, body=None, headers=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"null") if length else None

    def do_GET(self):
        self.route("GET")

    def do_PUT(self):
        self.route("PUT")

    def do_POST(self):
        self.route("POST")

    def route(self, method):
        url = urllib.parse.urlsplit(self.path)
        if url.path.startswith("/_fake/"):
            return self.admin(method, url.path, self.body() if method == "POST" else None)
        payload = self.body() if method == "PUT" else None
        m_nic, m_list, m_op = NIC_RE.match(url.path), LIST_RE.match(url.path), OP_RE.match(url.path)
        op = "put" if method == "PUT" else "get" if m_nic else "list" if m_list else "poll" if m_op else "other"
        nic_name = m_nic.group(3) if m_nic else None
        with LOCK:
            record = {"op": op, "method": method, "path": url.path, "nic": nic_name, "t": now(), "status": 0}
            STATE["calls"].append(record)
            status, body, headers = self.fault(op, nic_name)
            if status is None and self.headers.get("Authorization") != "Bearer " + TOKEN:
                status, body, headers = 401, error("AuthenticationFailed", "no or another bearer token"), {}
            if status is None and urllib.parse.parse_qs(url.query).get("api-version") != [API_VERSION]:
                status, body, headers = 400, error("InvalidApiVersionParameter", "api-version " + API_VERSION), {}
            if status is None and op == "put" and self.must_hold(nic_name):
                STATE["held"] += 1
                STATE["release"] = None
                while STATE["release"] is None:
                    HELD.wait()
                STATE["held"] -= 1
                if not STATE["release"].get("apply"):
                    status, body, headers = 500, error("InternalServerError", "held and dropped"), {}
            if status is None:
                status, body, headers = self.serve(op, url, m_nic or m_list or m_op, payload)
            record["status"] = status
        self.answer(status, body, headers)

    def fault(self, op, nic):
        for f in STATE["faults"]:
            if f["count"] > 0 and f["op"] in (op, "any") and f.get("nic") in (None, nic):
                f["count"] -= 1
                headers = {"Retry-After": str(f["retryAfter"])} if "retryAfter" in f else {}
                code = f.get("code") or {429: "TooManyRequests", 403: "AuthorizationFailed",
                                         500: "InternalServerError"}.get(f["status"], "Fault")
                return f["status"], error(code, "injected by the fake"), headers
        return None, None, None

    def must_hold(self, nic):
        hold = STATE["hold"]
        if hold and hold["op"] == "put" and hold["nic"].lower() == (nic or "").lower():
            STATE["hold"] = None
            return True
        return False

    def serve(self, op, url, match, payload):
        cfg = STATE["config"]
        if op == "get":
            nic = STATE["nics"].get(url.path.lower())
            if not nic:
                return 404, error("NotFound", "no NIC " + url.path), {}
            body = seen(nic, cfg["staleGetMs"])
            return 200, body, {"ETag": body["etag"]}
        if op == "list":
            prefix = url.path.lower() + "/"
            nics = [seen(n, cfg["staleListMs"]) for k, n in sorted(STATE["nics"].items()) if k.startswith(prefix)]
            skip = int(urllib.parse.parse_qs(url.query).get("$skiptoken", ["0"])[0])
            page = nics[skip:skip + cfg["pageSize"]]
            body = {"value": page}
            if skip + cfg["pageSize"] < len(nics):
                body["nextLink"] = "http://%s%s?api-version=%s&$skiptoken=%d" % (
                    self.headers.get("Host"), url.path, API_VERSION, skip + cfg["pageSize"])
            return 200, body, {}
        if op == "poll":
            record = STATE["ops"].get(match.group(3))
            if not record:
                return 404, error("NotFound", "no operation"), {}
            by_location = match.group(2).lower() == "operationresults"
            if now() < record["done_at"]:
                if by_location:
                    return 202, None, self.retry_headers()
                return 200, {"status": "InProgress"}, self.retry_headers()
            if record["final"] == "Failed":
                failure = error("NetworkInterfaceOperationFailed", "the fake failed the operation (lroFail)")
                if by_location:
                    return 400, failure, {}
                return 200, dict(failure, status="Failed"), {}
            if by_location:
                return 200, current(STATE["nics"][record["nic"]]), {}
            return 200, {"status": "Succeeded"}, {}
        if op == "put":
            return self.put(url, match, payload)
        return 404, error("NotFound", "the fake serves no " + url.path), {}

    def retry_headers(self):
        ms = STATE["config"]["pollMs"]
        return {"Retry-After": str(max(1, math.ceil(ms / 1000.0))), "retry-after-ms": str(ms)}

    def put(self, url, match, payload):
        key = url.path.lower()
        nic = STATE["nics"].get(key)
        if not nic:
            return 404, error("NotFound", "the fake creates NICs through /_fake/nic only"), {}
        old = current(nic)
        if_match = self.headers.get("If-Match")
        if if_match is not None and if_match != old["etag"]:
            return 412, error("PreconditionFailed", "etag %s is not %s" % (if_match, old["etag"])), {}
        if old["properties"].get("provisioningState") == "Updating":
            return 409, error("AnotherOperationInProgress", "an operation on the NIC is under way"), self.retry_headers()
        new = payload or {}
        ipcs = configs(new)
        if not any(c.get("properties", {}).get("primary") for c in ipcs):
            return 400, error("NicMustHaveAPrimaryIpConfiguration", "the primary ipConfiguration is required"), {}
        for c in ipcs:
            address, subnet = address_of(c), subnet_of(c)
            for other_key, other in STATE["nics"].items():
                if other_key == key:
                    continue
                for oc in configs(current(other)):
                    if address_of(oc) == address and subnet_of(oc) == subnet:
                        if STATE["config"]["inUseNamesHolder"]:
                            # The requesting ipConfiguration first, then the holder's (the
                            # wording is the fake's; the client takes any NIC id but its own).
                            message = ("IP configuration %s/ipConfigurations/%s is referencing private IP address %s "
                                       "which is already in use by another resource %s/ipConfigurations/%s." % (
                                           old["id"], c.get("name", "ipconfig"), address, current(other)["id"],
                                           oc.get("name", "ipconfig")))
                        else:
                            message = "Private IP address %s is already in use." % address
                        return 400, error("PrivateIPAddressInUse", message), {}
        body = copy.deepcopy(old)
        body["properties"]["ipConfigurations"] = ipcs
        body["properties"]["enableIPForwarding"] = bool(new.get("properties", {}).get("enableIPForwarding"))
        cfg = STATE["config"]
        delay = cfg["lroDelayMs"]
        final = "Succeeded"
        if cfg["lroFail"] > 0:
            cfg["lroFail"] -= 1
            final = "Failed"
        op = {"done_at": now() + delay / 1000.0, "final": final}
        body = write(key, body, op)
        STATE["op_seq"] += 1
        op_id = "op%d" % STATE["op_seq"]
        STATE["ops"][op_id] = dict(op, nic=key)
        sub = NIC_RE.match(url.path).group(1)
        link = "http://%s/subscriptions/%s/providers/Microsoft.Network/locations/fake/%%s/%s?api-version=%s" % (
            self.headers.get("Host"), sub, op_id, API_VERSION)
        mode = cfg["lroMode"]
        if mode == "location":
            headers = {"Location": link % "operationResults"}
            headers.update(self.retry_headers())
            return 202, None, headers
        headers = {"ETag": body["etag"]}
        if mode == "resource":
            return 201, body, headers
        headers["Azure-AsyncOperation"] = link % "operations"
        headers.update(self.retry_headers())
        return 200, body, headers

    def admin(self, method, path, body):
        with LOCK:
            if path == "/_fake/nic":
                return self.answer(200, {"id": make_nic(body)})
            if path == "/_fake/set":
                key = body["id"].lower()
                new = copy.deepcopy(current(STATE["nics"][key]))
                if "secondary" in body:
                    ipcs = [c for c in configs(new) if c["properties"].get("primary")]
                    subnet = ipcs[0]["properties"]["subnet"]
                    for i, a in enumerate(body["secondary"]):
                        ipcs.append({"name": "hand%d" % i, "properties": {
                            "primary": False, "privateIPAddress": a, "privateIPAllocationMethod": "Static",
                            "subnet": subnet}})
                    new["properties"]["ipConfigurations"] = ipcs
                if "ipForwarding" in body:
                    new["properties"]["enableIPForwarding"] = bool(body["ipForwarding"])
                write(key, new)
                return self.answer(200, {})
            if path == "/_fake/config":
                STATE["config"].update(body)
                return self.answer(200, STATE["config"])
            if path == "/_fake/faults":
                STATE["faults"].append(dict(body))
                return self.answer(200, {})
            if path == "/_fake/hold":
                STATE["hold"] = dict(body)
                return self.answer(200, {})
            if path == "/_fake/release":
                STATE["release"] = dict(body or {})
                HELD.notify_all()
                return self.answer(200, {})
            if path == "/_fake/calls":
                return self.answer(200, STATE["calls"])
            if path == "/_fake/reset-calls":
                STATE["calls"] = []
                return self.answer(200, {})
            if path == "/_fake/state":
                nics = {current(n)["id"]: {"addresses": [address_of(c) for c in configs(current(n))],
                                           "etag": current(n)["etag"],
                                           "ipForwarding": current(n)["properties"]["enableIPForwarding"],
                                           "provisioningState": current(n)["properties"]["provisioningState"]}
                        for n in STATE["nics"].values()}
                return self.answer(200, {"nics": nics, "held": STATE["held"]})
        return self.answer(404, error("NotFound", path))


def main():
    global TOKEN
    parser = argparse.ArgumentParser(description="A fake of ARM's network interface API (not Azure).")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=TOKEN)
    args = parser.parse_args()
    TOKEN = args.token
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print("azure-fake listening on %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

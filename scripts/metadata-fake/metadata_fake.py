#!/usr/bin/env python3
"""A FAKE instance metadata service (AWS IMDSv2, Azure IMDS Scheduled Events, OCI IMDS v2),
written from the published references; not a cloud.

It answers the calls tenure's maintenance notice watcher makes (crates/tenure/src/exec/notices/),
the way the references describe them, and nothing else:

AWS IMDSv2
  PUT  /latest/api/token                       header X-aws-ec2-metadata-token-ttl-seconds (1..21600)
  GET  /latest/meta-data/spot/instance-action  404 while none; {"action", "time"}
  GET  /latest/meta-data/events/recommendations/rebalance   404 while none; {"noticeTime"}
  GET  /latest/meta-data/events/maintenance/scheduled       a JSON list of events ([] while none)
  Every GET needs a token this server issued (X-aws-ec2-metadata-token): 401 without one.
Azure IMDS
  GET  /metadata/instance/compute/name?api-version=…&format=text     the VM's name
  GET  /metadata/scheduledevents?api-version=2020-07-01              {"DocumentIncarnation", "Events"}
  POST /metadata/scheduledevents?api-version=2020-07-01  {"StartRequests": [{"EventId"}]}: recorded
  Every call needs `Metadata: true` (400 without it), as Azure's IMDS does.
OCI IMDS v2
  GET  /opc/v2/instance/      needs `Authorization: Bearer Oracle` (401 without it)

The test's admin API (not of any cloud):
  POST /_fake/state     a JSON object merged into the state (keys below); answers the state
  GET  /_fake/counters  {"tokenPuts", "unauthorized", "acks": [bodies], "ackTimes": [Unix seconds],
                         "requests": {path: n}}
  POST /_fake/revoke-tokens   every IMDSv2 token issued so far expires (their GETs get 401)
State keys: awsSpot (object or null), awsRebalance (object or null), awsScheduled (list),
azureVmName, azureEvents (list), azureAfterAck ("keep": an acknowledged event stays listed,
as it does until the platform starts it; "remove"), ociInstanceId, ociRebootDue (text or null),
down (true: every cloud call answers 503).

Usage: metadata_fake.py [--port N]  (0 or absent: a free port); prints
"metadata-fake listening on PORT" once it accepts connections. Python 3 standard library only.
"""

import argparse
import json
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

LOCK = threading.Lock()
STATE = {
    "awsSpot": None,
    "awsRebalance": None,
    "awsScheduled": [],
    "azureVmName": "vm-a",
    "azureEvents": [],
    "azureAfterAck": "keep",
    "ociInstanceId": "ocid1.instance.oc1..fake",
    "ociRebootDue": None,
    "down": False,
}
COUNTERS = {"tokenPuts": 0, "unauthorized": 0, "acks": [], "ackTimes": [], "requests": {}}
TOKENS = set()
INCARNATION = [1]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet: the tests read counters, not logs
        pass

    def answer(self, status, body=b"", content_type="application/json"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def count(self, path):
        COUNTERS["requests"][path] = COUNTERS["requests"].get(path, 0) + 1

    def route(self, method):
        url = urlsplit(self.path)
        path, query = url.path, url.query
        body = self.body()
        with LOCK:
            if path.startswith("/_fake/"):
                return self.admin(method, path, body)
            self.count(f"{method} {path}")
            if STATE["down"]:
                return self.answer(503, "down (the fake was told to be)", "text/plain")
            if path.startswith("/latest/"):
                return self.aws(method, path)
            if path.startswith("/metadata/"):
                return self.azure(method, path, query, body)
            if path.startswith("/opc/"):
                return self.oci(method, path)
            return self.answer(404, "not found", "text/plain")

    def do_GET(self):
        self.route("GET")

    def do_PUT(self):
        self.route("PUT")

    def do_POST(self):
        self.route("POST")

    # --- AWS IMDSv2 ---
    def aws(self, method, path):
        if path == "/latest/api/token":
            if method != "PUT":
                return self.answer(405, "", "text/plain")
            ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return self.answer(400, "bad X-aws-ec2-metadata-token-ttl-seconds", "text/plain")
            token = secrets.token_urlsafe(24)
            TOKENS.add(token)
            COUNTERS["tokenPuts"] += 1
            return self.answer(200, token, "text/plain")
        if method != "GET":
            return self.answer(405, "", "text/plain")
        if self.headers.get("X-aws-ec2-metadata-token") not in TOKENS:
            COUNTERS["unauthorized"] += 1
            return self.answer(401, "", "text/plain")
        if path == "/latest/meta-data/spot/instance-action":
            spot = STATE["awsSpot"]
            return self.answer(200, spot) if spot else self.answer(404, "", "text/plain")
        if path == "/latest/meta-data/events/recommendations/rebalance":
            rebalance = STATE["awsRebalance"]
            return self.answer(200, rebalance) if rebalance else self.answer(404, "", "text/plain")
        if path == "/latest/meta-data/events/maintenance/scheduled":
            return self.answer(200, STATE["awsScheduled"])
        return self.answer(404, "", "text/plain")

    # --- Azure IMDS ---
    def azure(self, method, path, query, body):
        if self.headers.get("Metadata") != "true":
            return self.answer(400, {"error": "Bad request. Required metadata header not specified"})
        if "api-version=" not in query:
            return self.answer(400, {"error": "Bad request. api-version was not specified"})
        if path == "/metadata/instance/compute/name" and method == "GET":
            return self.answer(200, STATE["azureVmName"], "text/plain")
        if path == "/metadata/scheduledevents":
            if method == "GET":
                return self.answer(
                    200, {"DocumentIncarnation": INCARNATION[0], "Events": STATE["azureEvents"]}
                )
            if method == "POST":
                try:
                    request = json.loads(body or b"{}")
                    ids = [r["EventId"] for r in request["StartRequests"]]
                except (ValueError, KeyError, TypeError):
                    return self.answer(400, {"error": "Bad request. StartRequests expected"})
                known = {e.get("EventId") for e in STATE["azureEvents"]}
                if any(i not in known for i in ids):
                    return self.answer(400, {"error": "Bad request. Unknown EventId"})
                COUNTERS["acks"].append(request)
                COUNTERS["ackTimes"].append(time.time())
                if STATE["azureAfterAck"] == "remove":
                    STATE["azureEvents"] = [e for e in STATE["azureEvents"] if e.get("EventId") not in ids]
                    INCARNATION[0] += 1
                return self.answer(200, "")
        return self.answer(404, {"error": "Not found"})

    # --- OCI IMDS v2 ---
    def oci(self, method, path):
        if path.rstrip("/") != "/opc/v2/instance" or method != "GET":
            return self.answer(404, {"code": "NotFound"})
        if self.headers.get("Authorization") != "Bearer Oracle":
            COUNTERS["unauthorized"] += 1
            return self.answer(401, {"code": "NotAuthenticated"})
        instance = {
            "id": STATE["ociInstanceId"],
            "displayName": "fake",
            "region": "iad",
            "timeMaintenanceRebootDue": STATE["ociRebootDue"],
        }
        return self.answer(200, instance)

    # --- admin ---
    def admin(self, method, path, body):
        if path == "/_fake/state" and method == "POST":
            try:
                change = json.loads(body or b"{}")
            except ValueError as e:
                return self.answer(400, {"error": str(e)})
            unknown = [k for k in change if k not in STATE]
            if unknown:
                return self.answer(400, {"error": f"unknown state keys {unknown}"})
            STATE.update(change)
            if "azureEvents" in change:
                INCARNATION[0] += 1
            return self.answer(200, STATE)
        if path == "/_fake/revoke-tokens" and method == "POST":
            TOKENS.clear()
            return self.answer(200, {})
        if path == "/_fake/counters" and method == "GET":
            return self.answer(200, COUNTERS)
        return self.answer(404, {"error": "no such admin call"})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"metadata-fake listening on {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

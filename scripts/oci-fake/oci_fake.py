#!/usr/bin/env python3
"""A FAKE of the OCI Core Services private IP API, written from the published REST reference; not OCI.

It exists because no emulator of OCI can be installed here. It serves, on one loopback port:

- Core Services (API 20160918), the calls tenure's `oci` provider makes: GetVnic, UpdateVnic,
  ListPrivateIps (by subnetId [+ ipAddress], by vnicId; paged with `limit`/`page` and
  `opc-next-page`), GetPrivateIp, UpdatePrivateIp, CreatePrivateIp, DeletePrivateIp,
  PrivateIpVnicDetach (`POST /privateIps/{id}/actions/detach`). Every private IP has an `etag`
  that each write to it changes; GET, PUT, POST answers carry it in the `etag` header, and PUT,
  DELETE and detach honour `if-match` (412 `NoEtagMatch` when it differs). Private IPs have a
  `lifetime` (`EPHEMERAL`, or `RESERVED`: made by hand through the admin API, on a VNIC or on none,
  with `vnicId` null and `ipState: AVAILABLE`); UpdatePrivateIp `{vnicId}` assigns an unassigned
  one; detach unassigns a RESERVED one and keeps it (an EPHEMERAL one is refused 400: not checked
  against OCI).
- The instance metadata identity files (`/opc/v2/identity/{cert,intermediate,key}.pem`, header
  `Authorization: Bearer Oracle`) and a federation endpoint (`POST /v1/x509`) issuing session
  tokens (a JWT-shaped string with `exp`), so that instance principals are tested end to end.
- An admin API under `/_fake/` (unsigned, not counted): fixtures, per-operation call counters and a
  call log with times, fault injection, an eventual-consistency window, drift by hand, reserved private IPs, GET answers without their `etag` header (`POST /_fake/etags {"omit": true}`).
  A federation held for a while (`POST /_fake/federation {"delaySeconds": x}`; `GET /_fake/federations`
  says how many are being held, `federating`).

Every Core Services request's signature is VERIFIED (OCI signature version 1, rsa-sha256): with the
API key's public key for keyId `<tenancy>/<user>/<fingerprint>`, with the session key a federation
bound to the token for keyId `ST$<token>` (401 once the token expired). A federation request must
be signed with the instance key as `<tenancy>/fed-x509/<SHA-1 of the certificate>`.

What it does NOT model (real OCI does): IAM policies (every verified caller may do anything; use
fault injection for 401/404), compartments, IPv6 objects, VLANs, reserved public IPs, rate limits
(inject 429s), work requests, route rules. Behaviour written from the reference, never compared with OCI.

Python 3 standard library only. Usage:
  oci_fake.py --port 0 --api-key-id KEYID --api-public-key PUB.pem [--identity-dir DIR]
              [--tenancy OCID] [--token-lifetime SECONDS]
Prints `oci-fake listening on PORT` once it accepts connections.
"""

import argparse
import base64
import copy
import email.utils
import hashlib
import ipaddress
import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

SHA256_PREFIX = bytes.fromhex("3031300d060960864801650304020105000420")


def der_read(data, i):
    """One DER TLV at i: (tag, content, next index)."""
    tag = data[i]
    length = data[i + 1]
    i += 2
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(data[i:i + n], "big")
        i += n
    return tag, data[i:i + length], i + length


def public_key_of_spki(der):
    """(n, e) of a DER SubjectPublicKeyInfo holding an RSA key."""
    _, spki, _ = der_read(der, 0)
    _, _, i = der_read(spki, 0)  # AlgorithmIdentifier
    _, bits, _ = der_read(spki, i)
    _, rsa, _ = der_read(bits[1:], 0)
    _, n, j = der_read(rsa, 0)
    _, e, _ = der_read(rsa, j)
    return int.from_bytes(n, "big"), int.from_bytes(e, "big")


def pem_der(text):
    return base64.b64decode("".join(l for l in text.strip().splitlines() if not l.startswith("-----")))


def rsa_verify(key, message, signature_b64):
    n, e = key
    k = (n.bit_length() + 7) // 8
    try:
        signature = int.from_bytes(base64.b64decode(signature_b64), "big")
    except Exception:  # noqa: BLE001
        return False
    encoded = pow(signature, e, n).to_bytes(k, "big")
    digest = SHA256_PREFIX + hashlib.sha256(message).digest()
    expected = b"\x00\x01" + b"\xff" * (k - 3 - len(digest)) + b"\x00" + digest
    return encoded == expected


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class State:
    def __init__(self, args):
        self.lock = threading.Lock()
        self.args = args
        self.subnets = {}
        self.vnics = {}
        self.private_ips = {}
        self.history = [(time.monotonic(), {})]  # (time, private IPs) after each write
        self.lag = 0.0
        self.omit_etag = False  # POST /_fake/etags {"omit": true}: GET answers carry no etag header
        self.calls = {}
        self.log = []  # [monotonic seconds, operation, status]
        self.faults = []  # {"op", "status", "code", "count", "retryAfter"}
        self.sessions = {}  # token -> (public key, exp)
        self.federations = 0
        self.federation_delay = 0.0  # POST /_fake/federation {"delaySeconds": x}: each federation answers that late
        self.federating = 0  # federations being held by that delay now
        self.api_key = public_key_of_spki(pem_der(open(args.api_public_key).read()))
        self.identity = {}
        if args.identity_dir:
            for name in ("cert.pem", "intermediate.pem", "key.pem"):
                with open(f"{args.identity_dir}/{name}") as f:
                    self.identity[name] = f.read()
            cert = pem_der(self.identity["cert.pem"])
            self.fingerprint = ":".join(f"{b:02X}" for b in hashlib.sha1(cert).digest())
            self.instance_key = instance_public_key(cert)

    def write(self):
        self.history.append((time.monotonic(), copy.deepcopy(self.private_ips)))
        del self.history[:-200]

    def read_view(self):
        """The private IPs as a read sees them: the state `lag` seconds ago."""
        if self.lag <= 0:
            return self.private_ips
        seen = time.monotonic() - self.lag
        view = self.history[0][1]
        for at, snapshot in self.history:
            if at <= seen:
                view = snapshot
        return view


def instance_public_key(cert_der):
    """The RSA key of a certificate: the SPKI is the 7th field of TBSCertificate (with version)."""
    _, cert, _ = der_read(cert_der, 0)
    _, tbs, _ = der_read(cert, 0)
    i = 0
    fields = []
    while i < len(tbs):
        tag, content, nxt = der_read(tbs, i)
        fields.append((tag, tbs[i:nxt]))
        i = nxt
    if fields[0][0] == 0xA0:  # explicit version
        fields = fields[1:]
    return public_key_of_spki(fields[5][1])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY the client's delayed ACK adds
    # ~40 ms to every answer on a kept-alive connection.
    disable_nagle_algorithm = True
    state = None

    def log_message(self, *_):
        pass

    def answer(self, status, body=None, headers=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("opc-request-id", uuid.uuid4().hex)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, code, message, headers=None):
        self.answer(status, {"code": code, "message": message}, headers)

    def body(self):
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_PUT(self):
        self.route("PUT")

    def do_DELETE(self):
        self.route("DELETE")

    # --- signatures -------------------------------------------------------------------------

    def verify(self, body, federation=False):
        """None when the request is signed well, else (status, code, message)."""
        s = self.state
        auth = self.headers.get("authorization", "")
        if not auth.startswith("Signature "):
            return (401, "NotAuthenticated", "no Signature authorization")
        fields = {}
        for part in auth[len("Signature "):].split(","):
            k, _, v = part.partition("=")
            fields[k.strip()] = v.strip().strip('"')
        if fields.get("version") != "1" or fields.get("algorithm") != "rsa-sha256":
            return (401, "NotAuthenticated", "version 1, rsa-sha256 only")
        names = fields.get("headers", "").split()
        required = ["date", "(request-target)", "host"]
        if self.command in ("POST", "PUT"):
            required += ["content-length", "content-type", "x-content-sha256"]
        if any(r not in names for r in required):
            return (401, "NotAuthenticated", f"signed headers {names} lack one of {required}")
        if self.command in ("POST", "PUT"):
            if self.headers.get("x-content-sha256") != base64.b64encode(hashlib.sha256(body).digest()).decode():
                return (401, "NotAuthenticated", "x-content-sha256 does not match the body")
        try:
            skew = abs(time.time() - email.utils.parsedate_to_datetime(self.headers.get("date")).timestamp())
        except Exception:  # noqa: BLE001
            return (401, "NotAuthenticated", "no readable date")
        if skew > 300:
            return (401, "NotAuthenticated", "date more than 5 minutes off")
        lines = []
        for name in names:
            if name == "(request-target)":
                lines.append(f"(request-target): {self.command.lower()} {self.path}")
            else:
                value = self.headers.get(name)
                if value is None:
                    return (401, "NotAuthenticated", f"signed header {name} missing")
                lines.append(f"{name}: {value}")
        key_id = fields.get("keyId", "")
        with s.lock:
            if federation:
                if key_id != f"{s.args.tenancy}/fed-x509/{s.fingerprint}":
                    return (401, "NotAuthenticated", f"federation keyId {key_id} is not the instance certificate's")
                key = s.instance_key
            elif key_id.startswith("ST$"):
                session = s.sessions.get(key_id[3:])
                if session is None:
                    return (401, "NotAuthenticated", "unknown session token")
                if time.time() >= session[1]:
                    return (401, "NotAuthenticated", "session token expired")
                key = session[0]
            elif key_id == s.args.api_key_id:
                key = s.api_key
            else:
                return (401, "NotAuthenticated", f"unknown keyId {key_id}")
        if not rsa_verify(key, "\n".join(lines).encode(), fields.get("signature", "")):
            return (401, "NotAuthenticated", "signature does not verify")
        return None

    # --- routing ----------------------------------------------------------------------------

    def route(self, method):
        s = self.state
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        body = self.body()
        if parts[:1] == ["_fake"]:
            return self.admin(method, parts[1:], body)
        if parts[:2] == ["opc", "v2"] and parts[2:3] == ["identity"] and method == "GET":
            if self.headers.get("authorization") != "Bearer Oracle":
                return self.error(401, "NotAuthenticated", "metadata needs Authorization: Bearer Oracle")
            content = s.identity.get(parts[3] if len(parts) > 3 else "")
            if content is None:
                return self.error(404, "NotFound", self.path)
            data = content.encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return None
        if parts == ["v1", "x509"] and method == "POST":
            return self.federate(body)
        if parts[:1] != ["20160918"]:
            return self.error(404, "NotAuthorizedOrNotFound", self.path)
        operation = operation_of(method, parts[1:], query)
        if operation is None:
            return self.error(404, "NotAuthorizedOrNotFound", f"{method} {self.path}")
        with s.lock:
            s.calls[operation] = s.calls.get(operation, 0) + 1
            fault = next((f for f in s.faults if f["op"] in (operation, "*") and f["count"] > 0), None)
            if fault is not None:
                fault["count"] -= 1
        rejected = self.verify(body)
        if rejected is not None:
            self.record(operation, rejected[0])
            return self.error(*rejected)
        if fault is not None:
            headers = {"retry-after": str(fault["retryAfter"])} if fault.get("retryAfter") is not None else {}
            self.record(operation, fault["status"])
            return self.error(fault["status"], fault["code"], f"injected by the fake: {fault['code']}", headers)
        status, answer, headers = self.core(operation, parts[1:], query, body)
        self.record(operation, status)
        if status >= 400:
            return self.error(status, answer[0], answer[1])
        return self.answer(status, answer, headers)

    def record(self, operation, status):
        with self.state.lock:
            self.state.log.append([time.monotonic(), operation, status])

    def federate(self, body):
        s = self.state
        with s.lock:
            delay = s.federation_delay
            s.federating += 1
        try:
            time.sleep(delay)
        finally:
            with s.lock:
                s.federating -= 1
        rejected = self.verify(body, federation=True)
        if rejected is not None:
            return self.error(*rejected)
        request = json.loads(body)
        if request.get("certificate") != "".join(s.identity["cert.pem"].strip().splitlines()[1:-1]):
            return self.error(401, "NotAuthenticated", "not the instance certificate")
        key = public_key_of_spki(base64.b64decode(request["publicKey"]))
        exp = int(time.time() + s.args.token_lifetime)
        header = b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode())
        payload = b64url(json.dumps({"exp": exp, "sub": "ocid1.instance.oc1.iad.fakeinstance", "n": uuid.uuid4().hex}).encode())
        token = f"{header}.{payload}.fake"
        with s.lock:
            s.sessions[token] = (key, exp)
            s.federations += 1
        return self.answer(200, {"token": token})

    # --- Core Services ------------------------------------------------------------------------

    def core(self, operation, parts, query, body):
        s = self.state
        with s.lock:
            if operation == "GetVnic":
                vnic = s.vnics.get(parts[1])
                return (200, vnic, {}) if vnic else (404, ("NotAuthorizedOrNotFound", parts[1]), {})
            if operation == "UpdateVnic":
                vnic = s.vnics.get(parts[1])
                if vnic is None:
                    return 404, ("NotAuthorizedOrNotFound", parts[1]), {}
                update = json.loads(body or b"{}")
                if "skipSourceDestCheck" in update:
                    vnic["skipSourceDestCheck"] = bool(update["skipSourceDestCheck"])
                return 200, vnic, {}
            if operation == "GetPrivateIp":
                found = s.read_view().get(parts[1])
                if found is None:
                    return 404, ("NotAuthorizedOrNotFound", parts[1]), {}
                return 200, public(found), ({} if s.omit_etag else {"etag": found["_etag"]})
            if operation == "ListPrivateIps":
                return self.list(query)
            if operation == "CreatePrivateIp":
                request = json.loads(body)
                vnic = s.vnics.get(request.get("vnicId", ""))
                if vnic is None:
                    return 404, ("NotAuthorizedOrNotFound", str(request.get("vnicId"))), {}
                address = request.get("ipAddress")
                subnet = s.subnets[vnic["subnetId"]]
                if ipaddress.ip_address(address) not in ipaddress.ip_network(subnet["cidrBlock"]):
                    return 400, ("InvalidParameter", f"{address} is not in {subnet['cidrBlock']}"), {}
                if any(p["ipAddress"] == address and p["subnetId"] == vnic["subnetId"] for p in s.private_ips.values()):
                    return 409, ("Conflict", f"{address} is already in use in the subnet"), {}
                created = new_private_ip(vnic, address, False)
                s.private_ips[created["id"]] = created
                s.write()
                return 200, public(created), {"etag": created["_etag"]}
            if operation == "UpdatePrivateIp":
                found = s.private_ips.get(parts[1])
                if found is None:
                    return 404, ("NotAuthorizedOrNotFound", parts[1]), {}
                if self.etag_differs(found):
                    return 412, ("NoEtagMatch", f"if-match {self.headers.get('if-match')} is not the etag"), {}
                request = json.loads(body)
                target = s.vnics.get(request.get("vnicId", found["vnicId"]))
                if target is None:
                    return 404, ("NotAuthorizedOrNotFound", str(request.get("vnicId"))), {}
                if found["isPrimary"]:
                    return 400, ("InvalidParameter", "a primary private IP cannot be moved"), {}
                if target["subnetId"] != found["subnetId"]:
                    return 400, ("InvalidParameter", "the VNIC is in another subnet"), {}
                found["vnicId"] = target["id"]
                found["ipState"] = "ASSIGNED"
                bump(found)
                s.write()
                return 200, public(found), {"etag": found["_etag"]}
            if operation == "PrivateIpVnicDetach":
                found = s.private_ips.get(parts[1])
                if found is None:
                    return 404, ("NotAuthorizedOrNotFound", parts[1]), {}
                if self.etag_differs(found):
                    return 412, ("NoEtagMatch", f"if-match {self.headers.get('if-match')} is not the etag"), {}
                if found["lifetime"] != "RESERVED" or found["isPrimary"]:
                    return 400, ("InvalidParameter", "only a RESERVED secondary private IP can be detached"), {}
                found["vnicId"] = None
                found["ipState"] = "AVAILABLE"
                bump(found)
                s.write()
                return 200, public(found), {"etag": found["_etag"]}
            if operation == "DeletePrivateIp":
                found = s.private_ips.get(parts[1])
                if found is None:
                    return 404, ("NotAuthorizedOrNotFound", parts[1]), {}
                if self.etag_differs(found):
                    return 412, ("NoEtagMatch", f"if-match {self.headers.get('if-match')} is not the etag"), {}
                if found["isPrimary"]:
                    return 400, ("InvalidParameter", "a primary private IP cannot be deleted"), {}
                del s.private_ips[parts[1]]
                s.write()
                return 204, None, {}
        return 404, ("NotAuthorizedOrNotFound", operation), {}

    def etag_differs(self, found):
        wanted = self.headers.get("if-match")
        return wanted is not None and wanted != found["_etag"]

    def list(self, query):
        s = self.state
        view = list(s.read_view().values())
        if "subnetId" in query:
            view = [p for p in view if p["subnetId"] == query["subnetId"]]
        elif "vnicId" in query:
            view = [p for p in view if p["vnicId"] == query["vnicId"]]
        else:
            return 400, ("MissingParameter", "subnetId or vnicId is required"), {}
        if "ipAddress" in query:
            view = [p for p in view if p["ipAddress"] == query["ipAddress"]]
        view.sort(key=lambda p: p["id"])
        limit = int(query.get("limit", 100))
        start = int(query.get("page", "0"))
        page = [public(p) for p in view[start:start + limit]]
        headers = {"opc-next-page": str(start + limit)} if start + limit < len(view) else {}
        return 200, page, headers

    # --- admin ----------------------------------------------------------------------------------

    def admin(self, method, parts, body):
        s = self.state
        request = json.loads(body) if body else {}
        with s.lock:
            if parts == ["subnet"] and method == "POST":
                subnet = {"id": ocid("subnet"), "cidrBlock": request["cidr"]}
                s.subnets[subnet["id"]] = subnet
                return self.answer(200, subnet)
            if parts == ["vnic"] and method == "POST":
                vnic = {
                    "id": ocid("vnic"),
                    "subnetId": request["subnetId"],
                    "privateIp": request["primaryIp"],
                    "skipSourceDestCheck": bool(request.get("skipSourceDestCheck", True)),
                    "lifecycleState": "AVAILABLE",
                }
                s.vnics[vnic["id"]] = vnic
                primary = new_private_ip(vnic, request["primaryIp"], True)
                s.private_ips[primary["id"]] = primary
                s.write()
                return self.answer(200, vnic)
            if parts == ["drift"] and method == "POST":
                # By hand, as an operator in the console would: move the address to a VNIC, or
                # delete it (vnicId null).
                found = next((p for p in s.private_ips.values() if p["ipAddress"] == request["ipAddress"]), None)
                if request.get("vnicId") is None:
                    if found is not None:
                        del s.private_ips[found["id"]]
                elif found is None:
                    created = new_private_ip(s.vnics[request["vnicId"]], request["ipAddress"], False)
                    s.private_ips[created["id"]] = created
                else:
                    found["vnicId"] = request["vnicId"]
                    found["ipState"] = "ASSIGNED"
                    bump(found)
                s.write()
                return self.answer(200, {})
            if parts == ["reserved"] and method == "POST":
                # A RESERVED private IP made by hand, on a VNIC or on none (in a subnet).
                vnic = s.vnics[request["vnicId"]] if request.get("vnicId") else None
                created = new_private_ip(vnic, request["ipAddress"], False, "RESERVED")
                if vnic is None:
                    created["subnetId"] = request["subnetId"]
                s.private_ips[created["id"]] = created
                s.write()
                return self.answer(200, public(created))
            if parts == ["state"] and method == "GET":
                return self.answer(200, {"privateIps": [public(p) for p in s.private_ips.values()], "vnics": list(s.vnics.values())})
            if parts == ["calls"] and method == "GET":
                return self.answer(200, dict(s.calls))
            if parts == ["log"] and method == "GET":
                return self.answer(200, s.log)
            if parts == ["calls"] and method == "DELETE":
                s.calls.clear()
                s.log.clear()
                return self.answer(200, {})
            if parts == ["faults"] and method == "POST":
                s.faults.append({
                    "op": request.get("op", "*"),
                    "status": int(request["status"]),
                    "code": request.get("code", "Injected"),
                    "count": int(request.get("count", 1)),
                    "retryAfter": request.get("retryAfter"),
                })
                return self.answer(200, {})
            if parts == ["etags"] and method == "POST":
                s.omit_etag = bool(request.get("omit", False))
                return self.answer(200, {})
            if parts == ["faults"] and method == "DELETE":
                s.faults.clear()
                return self.answer(200, {})
            if parts == ["consistency"] and method == "POST":
                s.lag = float(request.get("lagSeconds", 0))
                return self.answer(200, {})
            if parts == ["sessions"] and method == "DELETE":
                # Every session token is revoked (as a key rotation on OCI's side would).
                s.sessions.clear()
                return self.answer(200, {})
            if parts == ["federations"] and method == "GET":
                return self.answer(200, {"federations": s.federations, "federating": s.federating})
            if parts == ["federation"] and method == "POST":
                s.federation_delay = float(request.get("delaySeconds", 0))
                return self.answer(200, {})
        return self.error(404, "NotFound", "/_fake/" + "/".join(parts))


def operation_of(method, parts, query):
    if parts[:1] == ["vnics"] and len(parts) == 2:
        return {"GET": "GetVnic", "PUT": "UpdateVnic"}.get(method)
    if parts == ["privateIps"]:
        return {"GET": "ListPrivateIps", "POST": "CreatePrivateIp"}.get(method)
    if parts[:1] == ["privateIps"] and len(parts) == 2:
        return {"GET": "GetPrivateIp", "PUT": "UpdatePrivateIp", "DELETE": "DeletePrivateIp"}.get(method)
    if parts[:1] == ["privateIps"] and parts[2:] == ["actions", "detach"] and method == "POST":
        return "PrivateIpVnicDetach"
    return None


def ocid(kind):
    return f"ocid1.{kind}.oc1.iad.fake{uuid.uuid4().hex}"


def new_private_ip(vnic, address, primary, lifetime="EPHEMERAL"):
    found = {
        "id": ocid("privateip"),
        "vnicId": vnic["id"] if vnic else None,
        "subnetId": vnic["subnetId"] if vnic else None,
        "ipAddress": address,
        "isPrimary": primary,
        "lifetime": lifetime,
        "ipState": "ASSIGNED" if vnic else "AVAILABLE",
    }
    bump(found)
    return found


def bump(found):
    """A write to the object: a new etag (kept in the object, so that lagging reads show the old one)."""
    found["_etag"] = uuid.uuid4().hex


def public(found):
    """The object as OCI shows it (no etag in the body)."""
    return {k: v for k, v in found.items() if not k.startswith("_")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key-id", required=True)
    parser.add_argument("--api-public-key", required=True)
    parser.add_argument("--identity-dir")
    parser.add_argument("--tenancy", default="ocid1.tenancy.oc1..faketenancy")
    parser.add_argument("--token-lifetime", type=float, default=3600)
    args = parser.parse_args()
    Handler.state = State(args)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"oci-fake listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

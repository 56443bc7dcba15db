"""Self-check of tenure's EC2 test server (run by `scripts/moto-server selfcheck`).

Starts stock moto (--plain) and the patched server on two free loopback ports with the project's
own script, runs the same EC2 calls on both with boto3, prints a table, and exits non-zero if
any row differs from what is expected: plain moto keeps a reassigned address on both ENIs and
does not match secondary addresses in filters (the gaps the patch exists for); the patched
server moves it, matches it, injects faults and counts calls.
"""

import json
import os
import select
import socket
import subprocess
import sys
import time
import urllib.request

import boto3
import moto
from botocore.config import Config
from botocore.exceptions import ClientError

SCRIPT = sys.argv[1]
IP = "10.0.0.10"
rows = []  # (check, plain, patched, expected, ok); "-": not run on that server


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(plain):
    port = free_port()
    args = [SCRIPT, "start", str(port)] + (["--plain"] if plain else [])
    began = time.monotonic()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline().strip() if ready else ""
    if line != f"moto listening on http://127.0.0.1:{port}":
        proc.kill()
        sys.exit(f"selfcheck: {' '.join(args)} did not print its ready line (got {line!r})")
    seconds = time.monotonic() - began
    return proc, f"http://127.0.0.1:{port}", seconds


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def http(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def client(endpoint):
    # One attempt per call: the server, not botocore's retries, is what is being checked.
    return boto3.client("ec2", endpoint_url=endpoint, region_name="us-east-1",
                        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))


def call(fn, **kwargs):
    """'ok' or 'Code/HTTP status'."""
    try:
        fn(**kwargs)
        return "ok"
    except ClientError as err:
        return f"{err.response['Error']['Code']}/{err.response['ResponseMetadata']['HTTPStatusCode']}"


def scenario(endpoint):
    """The reassignment and filter behaviour; returns what was observed."""
    ec2 = client(endpoint)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    a = ec2.create_network_interface(SubnetId=subnet, PrivateIpAddress="10.0.0.4")
    b = ec2.create_network_interface(SubnetId=subnet, PrivateIpAddress="10.0.0.5")
    a, b = a["NetworkInterface"]["NetworkInterfaceId"], b["NetworkInterface"]["NetworkInterfaceId"]
    names = {a: "A", b: "B"}

    def holders():
        enis = ec2.describe_network_interfaces(NetworkInterfaceIds=[a, b])["NetworkInterfaces"]
        held = [e["NetworkInterfaceId"] for e in enis
                if IP in [p["PrivateIpAddress"] for p in e["PrivateIpAddresses"]]]
        return "+".join(sorted(names[e] for e in held)) or "none"

    def matched(filter_name):
        enis = ec2.describe_network_interfaces(
            Filters=[{"Name": filter_name, "Values": [IP]}])["NetworkInterfaces"]
        return "+".join(sorted(names.get(e["NetworkInterfaceId"], "?") for e in enis)) or "none"

    seen = {}
    ec2.assign_private_ip_addresses(NetworkInterfaceId=a, PrivateIpAddresses=[IP])
    seen["assign to A: holders"] = holders()
    ec2.assign_private_ip_addresses(NetworkInterfaceId=b, PrivateIpAddresses=[IP],
                                    AllowReassignment=True)
    seen["reassign to B: holders"] = holders()
    seen["filter private-ip-address"] = matched("private-ip-address")
    seen["filter addresses.private-ip-address"] = matched("addresses.private-ip-address")
    seen["primary 10.0.0.4 filter still works"] = (
        "A" if [e["NetworkInterfaceId"] for e in ec2.describe_network_interfaces(
            Filters=[{"Name": "private-ip-address", "Values": ["10.0.0.4"]}])["NetworkInterfaces"]]
        == [a] else "wrong")
    # The old holder's stale release lands on its own ENI and removes nothing from the new one.
    ec2.unassign_private_ip_addresses(NetworkInterfaceId=a, PrivateIpAddresses=[IP])
    seen["stale unassign on A: holders"] = holders()
    return ec2, b, seen


def main():
    plain, plain_url, plain_secs = start(plain=True)
    patched, patched_url, patched_secs = start(plain=False)
    try:
        _, _, plain_seen = scenario(plain_url)
        ec2, b, patched_seen = scenario(patched_url)
        expected = {
            "assign to A: holders": ("A", "A"),
            "reassign to B: holders": ("A+B", "B"),
            "filter private-ip-address": ("none", "B"),
            "filter addresses.private-ip-address": ("none", "B"),
            "primary 10.0.0.4 filter still works": ("A", "A"),
            "stale unassign on A: holders": ("B", "B"),
        }
        for check, (want_plain, want_patched) in expected.items():
            got = (plain_seen[check], patched_seen[check])
            rows.append((check, got[0], got[1], f"{want_plain} | {want_patched}",
                         got == (want_plain, want_patched)))

        # Fault injection and counters: the patched server only.
        base = patched_url + "/_tenure"
        assign = lambda: call(ec2.assign_private_ip_addresses, NetworkInterfaceId=b,  # noqa: E731
                              PrivateIpAddresses=[IP], AllowReassignment=True)
        http("DELETE", base + "/calls")
        http("POST", base + "/faults", {"action": "AssignPrivateIpAddresses", "throttle": 2})
        got = " ".join(assign() for _ in range(3))
        want = "RequestLimitExceeded/503 RequestLimitExceeded/503 ok"
        rows.append(("throttle 2, then 3 assigns", "-", got, want, got == want))

        http("POST", base + "/faults", {"action": "AssignPrivateIpAddresses", "throttle": 1,
                                        "status": 500, "code": "InternalError",
                                        "message": "An internal error has occurred"})
        got = " ".join(assign() for _ in range(2))
        want = "InternalError/500 ok"
        rows.append(("5xx once, then 2 assigns", "-", got, want, got == want))

        http("POST", base + "/faults", {"action": "AssignPrivateIpAddresses", "unauthorized": True})
        got = " ".join(assign() for _ in range(2))
        http("DELETE", base + "/faults")
        got += " | cleared: " + assign()
        want = "UnauthorizedOperation/403 UnauthorizedOperation/403 | cleared: ok"
        rows.append(("unauthorized x2, DELETE, assign", "-", got, want, got == want))

        status, body = http("GET", base + "/calls")
        calls = json.loads(body) if status == 200 else {}
        got = f"AssignPrivateIpAddresses={calls.get('AssignPrivateIpAddresses')}"
        want = "AssignPrivateIpAddresses=8"
        rows.append(("GET /_tenure/calls", "-", got, want, got == want))
        http("DELETE", base + "/calls")
        status, body = http("GET", base + "/calls")
        rows.append(("DELETE /_tenure/calls, GET", "-", body, "{}", body == "{}"))

        status, _ = http("GET", plain_url + "/_tenure/calls")
        got = "not ours" if status != 200 else "answered"
        rows.append(("plain has no /_tenure", got, "-", "not ours", got == "not ours"))

        rows.append(("start-up to ready line (s)", f"{plain_secs:.1f}", f"{patched_secs:.1f}",
                     "", True))
        rows.append(("server RSS after checks (MiB)", f"{rss_mib(plain.pid):.0f}",
                     f"{rss_mib(patched.pid):.0f}", "", True))
    finally:
        for proc in (plain, patched):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()

    header = ("check", "plain moto", "patched")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(3)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  result")
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row[:3], widths)) + "  "
              + ("ok" if row[4] else f"MISMATCH, expected {row[3]}"))
    bad = [r[0] for r in rows if not r[4]]
    if bad:
        print(f"selfcheck: FAILED ({len(bad)} mismatch(es): {', '.join(bad)})", file=sys.stderr)
        sys.exit(1)
    print(f"selfcheck: moto {moto.__version__}: all {len(rows)} checks passed")


if __name__ == "__main__":
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    main()

#!/bin/sh
# An exec hook that only logs what it is asked to do, and succeeds.
#
# tenure runs it once per gated action (TENURE_VERB is `acquire` or `release`), with the
# stamped action as one JSON line on stdin and as TENURE_* variables. Exit 0 = executed; any
# other status = failed, the last line on stderr being the reason. It must be idempotent: the same
# idempotency key may come again after a crash or a timeout.
#
# Usage: echo-hook.sh [--log FILE]   (default: stderr only)
set -eu

log=/dev/null
if [ "${1:-}" = "--log" ] && [ -n "${2:-}" ]; then
    log=$2
fi

input=$(cat)   # the JSON object; read it even if unused, so tenure's write never blocks

line="$(date -u +%Y-%m-%dT%H:%M:%SZ) ${TENURE_VERB} ${TENURE_ADDRESS} holder=${TENURE_HOLDER} nic=${TENURE_NIC} pool=${TENURE_POOL} ownershipEpoch=${TENURE_OWNERSHIP_EPOCH} captureEpoch=${TENURE_CAPTURE_EPOCH} key=${TENURE_IDEMPOTENCY_KEY}"
printf '%s\n' "$line" >> "$log"
printf '%s\n' "$input" >> "$log"

case "$TENURE_VERB" in
    acquire) echo "logged acquire of ${TENURE_ADDRESS} to ${TENURE_NIC}" ;;
    release) echo "logged release of ${TENURE_ADDRESS} from ${TENURE_NIC}" ;;
    *) echo "unknown verb ${TENURE_VERB}" >&2; exit 2 ;;
esac

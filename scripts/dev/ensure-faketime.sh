#!/usr/bin/env bash
# Makes sure Debian's libfaketime (package faketime) is there for the fault
# tests of a server's clock (make test, make soak, make reliability), when
# running as root on Debian; elsewhere, or if it cannot be installed, those
# tests are skipped, saying so (make reliability fails without it).
set -uo pipefail
if ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "dlock: installing Debian's faketime package (for the clock-fault tests)" >&2
  export DEBIAN_FRONTEND=noninteractive
  (apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends faketime >/dev/null) ||
    echo "dlock: faketime not installed; the clock-fault tests will be skipped" >&2
  exit 0
fi
echo "dlock: no libfaketime (Debian's faketime package); the clock-fault tests will be skipped" >&2
exit 0

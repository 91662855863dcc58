#!/usr/bin/env bash
# Makes sure redis-server is available for the tests and the demo: the one on
# PATH (or $REDIS_SERVER), else Debian's redis-server package when running as
# root, else a message saying how to install it. It installs nothing else
# (the fault tests' libfaketime is ensure-faketime.sh's).
set -euo pipefail
if [ -n "${REDIS_SERVER:-}" ] && [ -x "${REDIS_SERVER}" ]; then exit 0; fi
if command -v redis-server >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "dlock: redis-server not found; installing Debian's redis-server package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends redis-server >/dev/null
  # The package may try to start a system service; the tests start their own
  # servers on free ports and need none.
  exit 0
fi
cat >&2 <<'MSG'
dlock: redis-server not found.
  Install it, for example:  sudo apt-get install redis-server   (Debian/Ubuntu)
                            brew install redis                  (macOS)
  or point $REDIS_SERVER at a redis-server binary.
MSG
exit 1

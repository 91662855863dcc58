#!/usr/bin/env bash
# make test's last step: vets and tests each module under extra/, and
# examples/ (each its own go.mod), under the race detector, then runs their
# allocation checks without it. The modules' tests mostly wait (schedules,
# fault windows, history runs), so up to $JOBS (default 3) run at once;
# each module's output is printed whole, in order, once it is done. Exits
# with the first failure's status.
set -u
GO=${GO:-go}
JOBS=${JOBS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mods=()
for m in extra/*/go.mod examples/go.mod; do
	[ -f "$m" ] || continue
	d=$(dirname "$m")
	mods+=("$d")
	while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do
		wait -n
	done
	log="$out/${d//\//_}"
	(
		cd "$d" && "$GO" vet ./... && "$GO" test -race -count=1 ./... &&
			if grep -rqs AllocsPerRun --include='*_test.go' .; then "$GO" test -count=1 -run Alloc ./...; fi
		echo $? >"$log.rc"
	) >"$log.out" 2>&1 &
done
wait
rc=0
for d in "${mods[@]}"; do
	log="$out/${d//\//_}"
	echo "== $d"
	cat "$log.out"
	s=$(cat "$log.rc" 2>/dev/null || echo 1)
	if [ "$s" != 0 ]; then
		echo "FAIL: $d"
		[ "$rc" != 0 ] || rc=$s
	fi
done
exit "$rc"

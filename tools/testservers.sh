#!/usr/bin/env bash
# make test's runs on the servers users move to, beside Debian's
# redis-server 7.0 (which every other step uses): Valkey and Redis 8, from
# ../shared/servers/ (see its README), where they exist: a developer's
# machine and CI. A clone without them skips each, saying so.
#
# On each: the contract suite (TestContract), the history checker
# (TestHistory, $HISTORY each topology), the fault tests that depend on the
# server's own behaviour and need no TLS (these builds have none), and the
# tests of what differs between servers (the scripts' commands, the
# restricted user's ACL line, SCAN for List). Not the rest of the fault
# tests: they test dlock's side (its rounds, timers and clean-up) under a
# fault the test makes, which no server changes, and make test already runs
# them on Redis 7.0; nor the extras' (the client families' side, the same
# on every server). The servers run one after the other (about 80s each),
# beside the modules' tests (make test): the two servers' runs at once, with
# other load, once failed a fault test's timing for want of CPU
# (TestSlotMigrationUnderLoad's releases). Each server's output: the
# tests that ran on it and their results, or everything of a run that
# failed. Exits with the first failure's status.
set -u
GO=${GO:-go}
HISTORY=${HISTORY:-5s}
dir=$(cd "$(dirname "$0")/.." && pwd)
servers=${SERVERS:-"$dir/../shared/servers/valkey-server $dir/../shared/servers/redis-server-8dev"}
tests='TestContract|TestHistory'
# The fault tests of the server's own behaviour: a failover, a live slot
# migration, a restart with and without its data, a frozen server, its
# clock stepped (libfaketime), commands renamed away, one shard, the
# sharded inbox across a slot's move and a failover.
tests+='|TestClusterFailover|TestSlotMigrationUnderLoad|TestServerRestartedUnderLoad|TestServerFrozenUnderLoad'
tests+='|TestFenceAfterRestartWithoutData|TestRedlockFenceAfterDelayedRestart|TestClockForwardJump|TestClockBackwardJump'
tests+='|TestMissingScripting|TestMissingWait|TestClusterWithoutSpublish|TestOneShardCluster|TestShardedSlotMigration|TestShardedFailover'
# What differs between servers: the scripts' commands and their versions,
# a script's refusal of an unknown command, TIME in a script, ACL rules
# (CLIENT SETINFO), RESP2 replies, SCAN of a Cluster node (a table per slot
# on Valkey 8 and Redis 8) for List, the waiting queue.
tests+='|TestScriptCommandsSinceMinimum|TestVersionBelow|TestServerTimeInScript|TestACLFromDocs|TestACLEveryFeature|TestACLClientSetinfo'
tests+='|TestStatusResp2|TestList|TestStatusNamesWaiters'
# What a CI log shows of a run that passed: each test's result, the history
# checker's summaries; of a run that failed, everything.
summary='^(--- |ok|FAIL|panic)|history\.go:[0-9]+: .*violations [0-9]'
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rc=0
for srv in $servers; do
	name=$(basename "$srv")
	echo "== $name: the contract suite, the history checker and the fault tests without TLS"
	if [ ! -x "$srv" ]; then
		echo "skipped: no $srv (the project's test servers exist only on a developer's machine and in CI; see CONTRIBUTING.md)"
		continue
	fi
	"$srv" --version
	log="$out/$name.log"
	(cd "$dir" && REDIS_SERVER="$srv" DLOCK_HISTORY_DURATION="$HISTORY" \
		"$GO" test -race -count=1 -timeout 15m -v -run "^($tests)\$" .) >"$log" 2>&1
	s=$?
	if [ "$s" = 0 ]; then
		grep -aE "$summary" "$log" | grep -avE '^\s+--- ' |
			sed -E 's/^(\s+history\.go:[0-9]+: )([0-9]+ acquisitions).*(faults [0-9]+).*(violations [0-9]+)$/\1\2, \3, \4/'
	else
		grep -av '^=== ' "$log"
		echo "FAIL: $name"
		[ "$rc" != 0 ] || rc=$s
	fi
done
exit "$rc"

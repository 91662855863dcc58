package main

// The manual, written by hand rather than generated from the flag set, so
// that it can explain and show examples.

const usage = `dlock runs a command while holding a distributed lock on Redis, so that on
a fleet of hosts exactly one of them runs it at a time.

Usage:
    dlock run [flags] KEY -- COMMAND [ARG]...   run COMMAND holding the lock KEY
    dlock status [flags] [--json] [-w] KEY      show who holds KEY, for how long (-w: every second)
    dlock list [flags] [--json] [-w] [PATTERN]  list every lock (matching PATTERN), holders and waiters
    dlock acquire [flags] KEY                   take KEY, print "TOKEN FENCE", leave it held for --ttl (no renewal)
    dlock extend --token T [--ttl D] KEY        hold KEY for D more, if token T holds it
    dlock release --token T KEY                 release KEY, if token T holds it
    dlock release --force [flags] KEY           delete KEY whoever holds it (admin)
    dlock request [--reason TEXT] [flags] KEY   ask KEY's holders to let go; they decide
    dlock demo                                  show the lock at work on local Redis servers
    dlock help [COMMAND]                        this text, or a command's
    dlock version                               print the version

Examples:
    # Every host of the fleet has this crontab line; one at a time runs the job.
    */5 * * * * dlock run --redis redis://:PASSWORD@redis.internal:6379 backup -- /usr/local/bin/backup

    # Wait up to a minute for the lock; exit 75 if it is still held by then.
    dlock run --wait 1m migrate -- ./migrate.sh

    # Redlock over three independent Redis masters (a majority must agree).
    export DLOCK_REDIS=redis://a:6379,redis://b:6379,redis://c:6379
    dlock run report -- ./report.sh

    # A lock taken in one step of a pipeline and released in another; a failed
    # acquire (75 busy, 69 Redis down, ...) stops the script with its status.
    lock=$(dlock acquire --ttl 10m deploy) || exit
    token=${lock% *} fence=${lock#* }
    dlock extend --token "$token" --ttl 10m deploy
    dlock release --token "$token" deploy

    dlock status --json backup
    dlock status --watch backup      # refreshed every second, until Ctrl-C
    dlock list 'deploy/*'            # every lock whose name begins with deploy/
    dlock release --force backup

Run 'dlock help run' for the flags and exit statuses of dlock run.
`

const redisFlagsUsage = `    --redis URL
        The Redis to lock on: redis://[USER:PASSWORD@]HOST[:PORT][/DB], or
        rediss://... for TLS. Repeat the flag, or separate URLs with commas, for
        a Redlock over several independent masters (a majority must grant the
        lock; two URLs that reach the same server are refused, and an even
        number of nodes tolerates no more failures than one node fewer: 4
        need 3). Default: $DLOCK_REDIS, else redis://127.0.0.1:6379.
        Passwords are never printed.
    --cluster
        The URLs are seed nodes of one Redis Cluster (no /DB in them).
    --sentinel MASTER
        The URLs are Sentinels that monitor the master named MASTER; the
        URL's user and password are the master's.
    --sentinel-password PASSWORD
        The Sentinels' own password (default $DLOCK_SENTINEL_PASSWORD).
    --tls-ca FILE
        PEM certificate(s) of the CA that signed the servers' certificates,
        for rediss:// URLs (else the system's roots, or $SSL_CERT_FILE).
    --tls-cert FILE, --tls-key FILE
        A client certificate and its key, for servers that require one
        (mutual TLS: Redis' tls-auth-clients yes).
    --tls-insecure-skip-verify
        Do not verify the servers' certificates. Anyone on the path can then
        read and change the traffic, passwords included: for tests only.
    --prefix STRING
        Prefix of the Redis keys (default "dlock:"). Processes that must exclude
        each other need the same prefix.
`

// The verbosity flags, in the words of each subcommand.
const (
	runVerbosityUsage = `    -q, --quiet
        Print only errors.
    -v, --verbose
        Say what dlock does: acquiring, forwarding signals, releasing.
`
	statusVerbosityUsage = `    -q, --quiet
        With --held, print nothing (the exit status answers); errors are
        printed.
    -v, --verbose
        Say which Redis the status is read from.
`
	listVerbosityUsage = `    -q, --quiet
        Print only the list and errors.
    -v, --verbose
        Say which Redis the list is read from.
`
	releaseVerbosityUsage = `    -q, --quiet
        Leave out the warning about a live holder; errors are printed.
    -v, --verbose
        Say which Redis the lock is deleted on.
`
)

var subUsage = map[string]string{
	"run": `Usage: dlock run [flags] KEY -- COMMAND [ARG]...

Runs COMMAND while holding the lock KEY, renewing it every TTL/3, and
releases it when COMMAND ends, whatever the reason. Flags go before KEY
(or between KEY and --).

COMMAND runs in its own process group with dlock's stdin, stdout and stderr,
and the environment variables DLOCK_KEY, DLOCK_TOKEN and DLOCK_FENCE (a number
that grows with every acquisition of KEY: pass it to storage that can reject
a stale holder's writes). Signals dlock receives (INT, TERM, HUP, QUIT, USR1,
USR2) are forwarded to the whole process group, so a shell's children get
them too. If dlock itself is killed, even with SIGKILL, COMMAND is killed with
it: its lock will expire and another host will start the same job (Linux: the
parent-death signal; other Unixes: a guard process in COMMAND's group, which
kills the group when dlock is gone).

While renewals go unconfirmed (Redis down, frozen or unreachable), COMMAND
is stopped before the lock could expire: its process group gets SIGTERM once
the validity left is down to --kill-grace, and SIGKILL TTL/20 (at most 50ms)
before the validity ends, so COMMAND has its whole grace to clean up and is
gone before another host can take the lock (exit 76). A renewal confirmed before then
keeps it running. If the lock is already gone (an administrator's release
--force, or a renewal refused because another process holds the key), another
host may run COMMAND already and no validity is left to protect: the group
gets SIGTERM as soon as dlock sees it (at the next renewal), then the whole
--kill-grace, then SIGKILL (exit 76).
A lock taken or deleted after its last renewal, when COMMAND ends before the
next one, is found gone by the final release: exit 76 as well, since nothing
then proves that COMMAND ran under the lock to its end.

When stdin is a terminal, dlock behaves like flock(1) under a shell: COMMAND
stays in dlock's process group (the terminal's foreground job), so it can
read the terminal, Ctrl-C reaches it, and Ctrl-Z stops the job and fg resumes
it; a lock whose validity ran down to --kill-grace while the job was stopped
stops COMMAND when it resumes (exit 76). Then TERM, USR1 and USR2 sent to dlock are forwarded to
COMMAND itself, and a lost lock's signals reach COMMAND only.

Flags:
    --ttl DURATION
        Lease length (default 30s): how long other hosts wait for the lock
        if this one dies. Renewed every TTL/3 while COMMAND runs.
    --wait DURATION
        How long to wait for the lock (default 0: try once). A waiter is woken
        by the holder's release, not by polling.
    --kill-grace DURATION
        Time between SIGTERM and SIGKILL when the lock could expire, or is
        gone (default 5s, cut to fit a short --ttl). At most 2·TTL/3 less the
        drift (TTL/100 + 2ms), the node timeout (TTL/5, at most 1s) and TTL/20
        (at most 50ms), so that a renewal still within its node timeout never
        stops COMMAND: 18.648s for --ttl 30s, 1.774s for 4s, 404ms for 1s.
    --metadata TEXT
        Who holds the lock, shown by dlock status (at most 1024 bytes;
        default "host=HOST pid=PID cmd=COMMAND", the command's name without
        its arguments, which may hold secrets).
    --limit N
        Run at most N copies at once across the fleet (default 1): KEY is
        then a semaphore of N permits. Every host must give the same N; a
        different one is refused (exit 78, naming both). Over several Redis
        URLs a permit needs more nodes than a lock: more than nodes·N/(N+1).
    --shared
        A shared hold (a read lock): COMMAND runs beside the other --shared
        holders of KEY, never beside one without it (an exclusive holder).
        A copy without --shared that waits for KEY stops new shared holds
        from starting, so it is not starved. Not with --limit.
    --on-request SIGNAL
        At the first release request for this holder (dlock request), send
        SIGNAL (INT, TERM, HUP, QUIT, USR1 or USR2) to COMMAND, once, and
        say who asked and why; COMMAND decides whether to end. Default:
        none (dlock then does not listen for requests).
` + redisFlagsUsage + runVerbosityUsage + `
Exit status:
    COMMAND's own  COMMAND ran; 128+N if it was killed by signal N
    75             the lock was held elsewhere for all of --wait; COMMAND did not
                   run (silent with -q)
    76             the lock was lost, or could have expired within --kill-grace,
                   while COMMAND ran (COMMAND was stopped); or the release found
                   it gone when COMMAND ended (taken or deleted since its last
                   renewal)
    64             usage error: bad flags, Redis URL, KEY or COMMAND missing
    69             too few Redis nodes answered (down, frozen, unreachable), for
                   all of --wait; printed also with -q
    78             Redis refused the commands: wrong password, ACL permission,
                   a value of another type at the lock's key, a Cluster node
                   through a plain URL, a database that does not exist, an
                   untrusted TLS certificate; or KEY is held with another
                   --limit (or --shared); printed also with -q
    126, 127       COMMAND could not be executed, or was not found

Examples:
    dlock run backup -- /usr/local/bin/backup --full
    dlock run --wait 10m --ttl 1m report -- sh -c 'make report && mail-report'
    dlock run --redis rediss://:PASSWORD@redis.internal:6380/2 payout -- ./payout
    dlock run -q nightly -- ./nightly.sh     # silent when another host has it
    dlock run --shared --wait 1m schema -- ./read-report   # beside other readers
`,
	"status": `Usage: dlock status [flags] [--json] [--watch [--interval DURATION]] KEY

Shows whether KEY is held and by whom (the holder's metadata: dlock run
stores its host, pid and command), the time left on its lease, its fence
(the counter: at least the fence of the latest acquisition) and how many
processes wait for it; with several Redis URLs, also what each node says.
It is a snapshot: it proves nothing about ownership.

Flags:
    --json
        Print JSON for scripts: {"key", "held", "reserved", "ttl_ms", "fence",
        "waiters", "metadata", "limit", "shared", "writers", "permits":
        [{"metadata", "ttl_ms"}], "quorum", "nodes": [{"addr", "held",
        "reserved", "ttl_ms", "fence", "waiters", "error"}]}. ttl_ms is 0 when
        the key is not held; metadata is left out when there is none; limit
        and permits are there for a semaphore (dlock run --limit) that has
        holders, shared and permits for shared holders (dlock run --shared);
        writers counts the waiting exclusive copies that stop new shared
        holds from starting, when there are any.
    -w, --watch
        Show the status again every --interval until Ctrl-C (SIGINT) or
        SIGTERM, then exit 0: for watching a stuck job. On a terminal each
        refresh replaces the last, under a line with the time; otherwise the
        refreshes follow one another, each under such a line, with a blank
        line between them. With --json, one JSON object per refresh, each on
        one line, with "time" (when the refresh began) added. A refresh that
        reaches no Redis node prints its error on stderr, and the watch goes
        on; Redis refusing the commands ends it (78).
    --interval DURATION
        Time between refreshes with --watch (default 1s; more than 0).
    --held
        Answer "is it held?" by the exit status: 0 when KEY is held (a
        semaphore: by at least one holder), 3 when it is free (as LSB's
        "status" of a service that is not running); with -q, print nothing.
        Not with --watch.
` + redisFlagsUsage + statusVerbosityUsage + `
Exit status: 0; with --held, 3 when KEY is free; 69 when no Redis node
answered (not with --watch); 78 when Redis refused the commands (see dlock
help run); 64 on a usage error.

Examples:
    dlock status backup
    if dlock status -q --held backup; then echo "a backup is running"; fi
    dlock status --json backup | jq .held
    dlock status --watch --interval 5s backup
    dlock status --watch --json backup | jq -c '{time, held, fence}'
`,
	"list": `Usage: dlock list [flags] [--json] [--watch [--interval DURATION]] [PATTERN]

Lists every lock under the prefix whose name matches PATTERN (a Redis glob:
* any text, ? one character, [abc] [a-z] [^a] a set, \ quotes the next
character; default *): one line per lock held or waited for, with its shape
(lock, semaphore of N, shared), whether it is held (with several Redis URLs:
by how many nodes), the time left, the fence, its holders' metadata, its
waiters (how many, and the first ones in queue order) and a pending release
request. The names are found with SCAN (COUNT 1000), never KEYS, on every
node and every master of a Cluster, so that Redis is never held up, however
many keys it has; the whole listing is bounded by a minute. The user needs
SCAN (see docs/operations.md). It is a snapshot: it proves nothing about
ownership; dlock status KEY shows one lock in full.

Flags:
    --json
        Print JSON for scripts: {"pattern", "complete", "locks": [...]}, each
        lock as dlock status --json prints it, with "key". complete is false
        when a node could not be scanned whole (the locks only it holds may
        be missing).
    -w, --watch
        List again every --interval until Ctrl-C (SIGINT) or SIGTERM, then
        exit 0, as dlock status --watch does (with --json, one JSON object per
        refresh, each on one line, with "time").
    --interval DURATION
        Time between refreshes with --watch (default 1s; more than 0).
` + redisFlagsUsage + listVerbosityUsage + `
Exit status: 0; 69 when a Redis node could not be scanned whole (the locks
found on the others are printed; not with --watch); 78 when Redis refused
the commands (SCAN included); 64 on a usage error.

Examples:
    dlock list
    dlock list 'deploy/*'
    dlock list --json | jq -r '.locks[] | select(.waiters > 0) | .key'
    dlock list --watch --interval 5s 'report-*'
`,
	"release": `Usage: dlock release --token TOKEN [--limit N | --shared] [flags] KEY
       dlock release --force [flags] KEY

With --token, releases the hold of KEY that TOKEN names (the token dlock
acquire printed), only if that token still holds it, and wakes the next
waiter: two round trips, the owner check (which sets the hold's TTL to 5s,
what is left if the release itself cannot be confirmed) and the release.

With --force, deletes the lock KEY on every node whoever holds it, and
wakes the next waiter: an administrator's tool for a lock whose holder is
known to be gone. A live holder sees its lock lost at its next renewal
(dlock run then stops its command with exit status 76), or at its release
if its command ends first (dlock run then exits 76 too), and may act as the
holder until then; fencing is the defence.

Flags:
    --token TOKEN
        Release only the hold of this token.
    --limit N, --shared
        With --token: the hold's shape, as given to dlock acquire.
    --force
        Delete the lock regardless of owner. One of --token and --force is
        required.
` + redisFlagsUsage + releaseVerbosityUsage + `
Exit status: 0; 76 (with --token) when TOKEN does not hold KEY (it expired,
was released, taken or deleted, or has another shape); 1 when some node
could not be reached (--force); 69 when too few could; 78 when Redis
refused the commands; 64 on a usage error.

Examples:
    dlock release --token 5f0c9a... deploy
    dlock release --force backup
`,
	"acquire": `Usage: dlock acquire [flags] KEY

Takes the lock KEY (waiting up to --wait), prints "TOKEN FENCE" on one line
(the owner token, 32 hex characters, and the fence, a decimal number that
grows with every acquisition of KEY), and exits, leaving KEY held for --ttl.
Nothing renews it: it is free again when --ttl runs out, unless dlock extend
renews it or dlock release releases it first (give them the token). For a
command that runs while the lock is held and renewed, use dlock run.

Flags:
    --ttl DURATION
        How long KEY stays held (default 30s).
    --wait DURATION
        How long to wait for the lock (default 0: try once).
    --metadata TEXT
        Who holds the lock, shown by dlock status (at most 1024 bytes).
    --limit N
        Take one of N permits (a semaphore), as dlock run --limit.
    --shared
        A shared hold, as dlock run --shared. Not with --limit.
` + redisFlagsUsage + `
Exit status: 0 (TOKEN FENCE printed); 75 when the lock was held elsewhere for
all of --wait; 69 when too few Redis nodes answered; 78 when Redis refused
the commands or KEY is held with another --limit (or --shared); 64 on a
usage error.

Example (a failed acquire stops the script with its status; the step after
it never runs without the lock):
    lock=$(dlock acquire --ttl 10m deploy) || exit
    token=${lock% *} fence=${lock#* }
`,
	"extend": `Usage: dlock extend --token TOKEN [--ttl DURATION] [--limit N | --shared] [flags] KEY

Sets the TTL of the hold of KEY that TOKEN names (the token dlock acquire
printed) to --ttl from now, if that token still holds it, on a quorum of the
nodes; the fence stays the one acquire printed. One round trip. Nothing
renews it afterwards.

Flags:
    --token TOKEN
        Required: the hold's token.
    --ttl DURATION
        How long KEY stays held from now (default 30s).
    --limit N, --shared
        The hold's shape, as given to dlock acquire.
` + redisFlagsUsage + `
Exit status: 0; 76 when TOKEN does not hold KEY (it expired, was released,
taken or deleted, or has another shape); 69 when too few Redis nodes
answered; 78 when Redis refused the commands; 64 on a usage error.

Example:
    dlock extend --token "$token" --ttl 10m deploy
`,
	"request": `Usage: dlock request [--reason TEXT] [flags] KEY

Asks the current holders of KEY (the holder of a lock, every holder of a
--limit semaphore, every --shared hold) to let go. Each hears it once and
decides: nothing is released by the request (dlock release --force is the
abrupt way). dlock run passes it to its command as the signal of
--on-request. A holder that takes KEY later is not asked. dlock status
shows the request while its holder has it.

Flags:
    --reason TEXT
        Why (at most 1024 bytes): the holder reads it, dlock status shows it.
` + redisFlagsUsage + `    -q, --quiet
        Print only errors.
    -v, --verbose
        Say which Redis the request is sent to.

Exit status: 0 when the holders were asked (with several URLs: by a
majority of the nodes); 3 when KEY is not held (nobody was asked); 69 when
too few Redis nodes answered; 78 when Redis refused the commands; 64 on a
usage error.

Example:
    dlock request --reason "deploying v2" reindex
`,
	"demo": `Usage: dlock demo [--short]

Starts 5 redis-server processes on free loopback ports (Debian's redis-server
package must be installed), and shows the lock at work:
  1. 20 workers doing a non-atomic read-modify-write under one lock on one
     Redis: no lost update, no overlap, strictly increasing fences; then the
     same without the lock, losing updates.
  2. The same on a 5-node Redlock; with 2 nodes frozen (SIGSTOP) work goes on
     (20 contending workers, then one alone);
     with 3 frozen acquisitions are refused cleanly; then all are thawed.
  3. A holder whose Redis stops answering learns that it lost the lock
     before the lock could have expired.
  4. A summary: acquisitions per second, handoff latency, Redis commands per
     acquisition.
It takes well under 30 seconds and stops every process it started, also on
Ctrl-C.

Flags:
    --short
        A shorter run, with fewer acquisitions (used by the tests).
`,
	"help": `Usage: dlock help [COMMAND]

Prints the manual, or the manual of COMMAND (run, acquire, extend, release,
request, status, demo).
`,
	"version": `Usage: dlock version

Prints dlock's version, from the binary's build information.
`,
}

// SPDX-License-Identifier: Apache-2.0

// Package dlockgocron runs gocron (github.com/go-co-op/gocron/v2) jobs on
// several instances of a service with dlock (github.com/dlock-dev/dlock)
// deciding which instance runs them. It offers gocron's two ways:
//
//   - [NewLocker] returns a gocron.Locker for gocron.WithDistributedLocker:
//     every instance schedules every job, and each run first takes the job's
//     dlock lock without waiting. The instance that gets it runs the job; the
//     others skip that run. The lock is renewed while the job runs and, to
//     cover clock skew between the instances, held at least a minimum time
//     (WithMinHold).
//   - [NewElector] returns a gocron.Elector for
//     gocron.WithDistributedElector: the instances elect a leader with
//     dlock's Campaign, and only the leader runs jobs.
//
// # What holds on failure
//
// Both fail closed: an instance that cannot reach Redis runs no job (Lock
// returns an error wrapping dlock.ErrUnavailable; IsLeader an error, since
// the leadership is lost before its lock can expire in Redis).
//
// A lock or leadership can be lost while a job runs: Redis did not confirm a
// renewal in time (a partition, a paused process), or an administrator
// force-released it. gocron gives a job no context tied to its lock, so the
// job keeps running unless it watches: [Locker.Held] and
// [Elector.Leadership] return the dlock lock, whose Lost channel closes as
// soon as ownership can no longer be guaranteed, before the lock can have
// expired in Redis and so before another instance can take it over. A job
// that stops when Lost closes does not overlap a run on another instance
// (up to dlock's limits: a pause of the process longer than the lock's
// validity; a force-release, which lets another instance in before the
// holder's next renewal finds out); one that ignores it may. For storage that can check it, pass
// the lock's Fence with every write: a later holder's fence is larger.
// Unlock reports a lock lost during the run (dlock.ErrLockLost), though
// gocron discards that error.
package dlockgocron

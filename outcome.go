package dlock

import (
	"fmt"
	"strings"

	"github.com/dlock-dev/dlock/internal/quorum"
)

// outcome is a quorum round's answers, counted once, per node: confirmed
// (granted, extended, released), refused (the key holds another value),
// unavailable (an error that a later attempt may not get, or no answer that
// counted), or misconfigured (a permanent error: see ErrMisconfigured). A
// node that had not answered when the round decided early is in none of
// them. Every round of the Locker is counted here and mapped to its error
// by class, so that an error means the same thing whichever call made it.
type outcome struct {
	key string // for the hook's node events
	// callerDone: the caller's context had ended when the round did, so a
	// node's failure may be the caller's deadline, not the node's; it is
	// not told to the hook.
	callerDone                              bool
	n, q                                    int
	ok, refused, unavailable, misconfigured int
	// free lists the nodes that refused because the key is free (extend.lua
	// answers -1), for regain.
	free []int
	// errs has one *NodeError per failed node.
	errs []error
}

// newOutcome begins counting a round on the Locker's nodes for key that
// needs q of them.
func (l *Locker) newOutcome(key string, q int) outcome {
	return outcome{key: key, n: len(l.nodes), q: q}
}

// confirmed counts a node that confirmed (granted, extended, released).
func (o *outcome) confirmed() { o.ok++ }

// refusal counts a node that refused: the key holds another value.
func (o *outcome) refusal() { o.refused++ }

// decided records whether the caller's context had ended when the round
// decided (see callerDone).
func (o *outcome) decided(callerDone bool) { o.callerDone = callerDone }

// failed counts node i's failure.
func (o *outcome) failed(l *Locker, i int, err error) {
	if l.slotMoving(i, err) {
		err = &slotMovingError{err}
	}
	if permanent(err) {
		o.misconfigured++
	} else {
		o.unavailable++
	}
	o.errs = append(o.errs, l.nodeErr(i, err))
	if !o.callerDone {
		l.nodeEvent(i, o.key, err)
	}
}

// missed counts the nodes whose answer did not count.
func (o *outcome) missed(l *Locker, missing []quorum.Missing) {
	for _, m := range missing {
		o.failed(l, m.Node, m.Err)
	}
}

// ownerChecked counts the answers of owner-checked commands (extend.lua,
// release.lua): 1 confirmed, 0 another value, -1 a free key.
func (l *Locker) ownerChecked(key string, results []quorum.Result[int64], missing []quorum.Missing, q int) outcome {
	o := l.newOutcome(key, q)
	for _, r := range results {
		switch {
		case r.Err != nil:
			o.failed(l, r.Node, r.Err)
		case r.Val == 1:
			o.confirmed()
		default:
			o.refusal()
			if r.Val == -1 {
				o.free = append(o.free, r.Node)
			}
		}
	}
	o.missed(l, missing)
	return o
}

// class is the error class of a round that did not reach its quorum, or nil
// if it did. busy is the class of a round that the refusals decided:
// ErrNotAcquired for an acquisition (the holder may let go, so a refusal is
// not final), ErrNotHeld for an owner-checked command (a refusal is final:
// the key is not ours there). A quorum out of reach without the nodes that
// answered with a permanent error is ErrMisconfigured; out of reach with
// them and the refusals, busy for an acquisition (waiting for the holder
// can still help) and ErrMisconfigured for an owner-checked command;
// anything else, ErrUnavailable.
func (o *outcome) class(busy error) error {
	beyond := o.n - o.q // more failures than this, and no quorum can form
	switch {
	case o.ok >= o.q:
		return nil
	case busy == ErrNotHeld && o.refused > beyond:
		return ErrNotHeld
	case o.misconfigured > beyond:
		return ErrMisconfigured
	case o.refused+o.misconfigured > beyond && busy == ErrNotAcquired:
		return ErrNotAcquired
	case o.refused+o.misconfigured > beyond:
		return ErrMisconfigured
	default:
		return ErrUnavailable
	}
}

// counts says how the nodes answered, for an error message.
func (o *outcome) counts(verb string) string {
	if o.n == 1 {
		return ""
	}
	return fmt.Sprintf(" (%d of %d nodes %s, %d needed)", o.ok, o.n, verb, o.q)
}

// wrap returns an error wrapping class, the message what, the errors first
// (a context's error), and every node's failure: "CLASS: WHAT: ERR; ERR".
func (o *outcome) wrap(class error, what string, first ...error) error {
	errs := append(first, o.errs...)
	if len(errs) == 0 {
		return fmt.Errorf("%w: %s", class, what)
	}
	return &roundError{class: class, what: what, errs: errs}
}

// roundError is the error of a round with node failures (see wrap). Its
// message is made when asked for, from the errors as they are then, so
// that the cause a node's failure is given after the round (nameCauses)
// shows in it.
type roundError struct {
	class error
	what  string
	errs  joined
}

func (e *roundError) Error() string {
	return e.class.Error() + ": " + e.what + ": " + e.errs.Error()
}

func (e *roundError) Unwrap() []error { return []error{e.class, e.errs} }

// joined is errors.Join on one line: the errors, separated by "; ".
type joined []error

func (j joined) Error() string {
	msgs := make([]string, len(j))
	for i, e := range j {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

func (j joined) Unwrap() []error { return j }

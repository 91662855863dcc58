package script

import (
	"errors"
	"slices"
	"testing"
)

// TestExtendCall: the command's layout is extend.lua's header's: the keys
// of every lock, the shared arguments once, then each lock's own; a call
// of short groups is renew.lua's, two keys and two arguments per lock; a
// lock of the other shape, or past the call's locks, panics.
func TestExtendCall(t *testing.T) {
	c := NewExtendCall(2, false, "3000", "0", "60000")
	c.Add([]any{"a", "a:fence", "a:meta", "a:limit", "a:dead"}, "ta", "", "1", "7")
	c.Add([]any{"b", "b:fence", "b:meta", "b:limit", "b:dead"}, "tb", "m", "0", "8")
	want := []any{"evalsha", Extend.sha, "10",
		"a", "a:fence", "a:meta", "a:limit", "a:dead", "b", "b:fence", "b:meta", "b:limit", "b:dead",
		"3000", "0", "60000", "ta", "", "1", "7", "tb", "m", "0", "8"}
	if got := c.Command(); !slices.Equal(got, want) {
		t.Errorf("command %v, want %v", got, want)
	}
	s := NewExtendCall(2, true, "3000", "0", "60000")
	s.AddShort([]any{"a", "a:fence"}, "ta", "7")
	s.AddShort([]any{"b", "b:fence"}, "tb", "8")
	want = []any{"evalsha", Renew.sha, "4", "a", "a:fence", "b", "b:fence", "3000", "60000", "ta", "7", "tb", "8"}
	if got := s.Command(); !slices.Equal(got, want) {
		t.Errorf("short command %v, want %v", got, want)
	}
	for what, f := range map[string]func(){
		"a third Add to a call for two": func() { c.Add([]any{"c", "c:fence", "c:meta", "c:limit", "c:dead"}, "tc", "", "1", "9") },
		"AddShort to a whole call":      func() { NewExtendCall(1, false, "3000", "0", "60000").AddShort([]any{"c", "c:fence"}, "tc", "9") },
		"Add to a call of short groups": func() {
			NewExtendCall(1, true, "3000", "0", "60000").Add([]any{"c", "c:fence", "c:meta", "c:limit", "c:dead"}, "tc", "", "1", "9")
		},
		"AddShort with the whole group's keys": func() {
			NewExtendCall(1, true, "3000", "0", "60000").AddShort([]any{"c", "c:fence", "c:meta", "c:limit", "c:dead"}, "tc", "9")
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", what)
				}
			}()
			f()
		}()
	}
}

// TestExtendReplies: each group's answer is its own; a call's error, or a
// reply of another shape, is every group's.
func TestExtendReplies(t *testing.T) {
	groupErr := replyErr("WRONGTYPE x") // go-redis gives its own error type
	vals, errs := ExtendReplies([]any{int64(1), groupErr, int64(-1)}, nil, 3)
	if !slices.Equal(vals, []int64{1, 0, -1}) || errs[0] != nil || !errors.Is(errs[1], groupErr) || errs[2] != nil {
		t.Errorf("vals %v errs %v", vals, errs)
	}
	callErr := errors.New("i/o timeout")
	_, errs = ExtendReplies(nil, callErr, 2)
	if !errors.Is(errs[0], callErr) || !errors.Is(errs[1], callErr) {
		t.Errorf("a call's error: %v", errs)
	}
	for _, v := range []any{int64(1), []any{int64(1)}, []any{int64(1), "x"}} {
		_, errs = ExtendReplies(v, nil, 2)
		var re *ReplyError
		if !errors.As(errs[0], &re) && !errors.As(errs[1], &re) {
			t.Errorf("reply %v: %v, want a ReplyError", v, errs)
		}
	}
}

type replyErr string

func (e replyErr) Error() string { return string(e) }

package node

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestStringMap(t *testing.T) {
	want := map[string]string{"a": "1", "b": "2"}
	for _, v := range []any{
		[]any{"a", "1", "b", "2"},             // RESP2
		map[any]any{"a": "1", "b": "2"},       // RESP3
		[]any{"a", "1", "b", "2", "dangling"}, // an odd element is left out
	} {
		if got := StringMap(v); !reflect.DeepEqual(got, want) {
			t.Errorf("StringMap(%v) = %v", v, got)
		}
	}
	if got := StringMap(nil); got == nil || len(got) != 0 {
		t.Errorf("StringMap(nil) = %#v, want an empty map", got)
	}
}

func TestScoredMembers(t *testing.T) {
	want := []Scored{{"m1", 10}, {"m2", 20.5}}
	for _, v := range []any{
		[]any{"m1", "10", "m2", "20.5"},                  // RESP2
		[]any{[]any{"m1", 10.0}, []any{"m2", 20.5}},      // RESP3
		[]any{"m1", "10", "bad", "x", "m2", "20.5"},      // a score that is no number is left out
		[]any{[]any{"m1", int64(10)}, []any{"m2", 20.5}}, // an integer score
	} {
		if got := ScoredMembers(v); !reflect.DeepEqual(got, want) {
			t.Errorf("ScoredMembers(%v) = %v", v, got)
		}
	}
	if got := ScoredMembers(nil); len(got) != 0 {
		t.Errorf("ScoredMembers(nil) = %v", got)
	}
}

func TestReplyErrors(t *testing.T) {
	reply := &ReplyError{Msg: "ERR NOSCRIPT No matching script"}
	wrapped := fmt.Errorf("node 1: %w", reply)
	for _, err := range []error{reply, wrapped} {
		if !IsReply(err) || !HasErrorPrefix(err, "NOSCRIPT") || HasErrorPrefix(err, "MOVED") {
			t.Errorf("%v: IsReply %v, NOSCRIPT %v", err, IsReply(err), HasErrorPrefix(err, "NOSCRIPT"))
		}
		if msg, ok := Reply(err); !ok || msg != reply.Msg {
			t.Errorf("Reply(%v) = %q, %v", err, msg, ok)
		}
	}
	for _, err := range []error{nil, errors.New("NOSCRIPT but a transport's"), ErrClosed} {
		if IsReply(err) || HasErrorPrefix(err, "NOSCRIPT") {
			t.Errorf("%v taken for an error reply", err)
		}
	}
}

func TestInt(t *testing.T) {
	for v, want := range map[any]int64{int64(7): 7, "42": 42} {
		if n, ok := Int(v); !ok || n != want {
			t.Errorf("Int(%v) = %d, %v", v, n, ok)
		}
	}
	for _, v := range []any{nil, "x", 1.5} {
		if _, ok := Int(v); ok {
			t.Errorf("Int(%v) read as an integer", v)
		}
	}
}

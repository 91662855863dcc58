package script

import (
	"errors"
	"strconv"
	"testing"
)

// FuzzParseAcquire: no reply shape makes the parser panic, and a reply
// that parses as a grant carries the fence given as a decimal string.
func FuzzParseAcquire(f *testing.F) {
	f.Add(int64(1), "1796048553758864", int64(0), "", false)
	f.Add(int64(0), "", int64(1234), "1796048553758864", true)
	f.Add(int64(0), "", int64(-3), "0", true)
	f.Add(int64(1), "18446744073709551615", int64(0), "", false)
	f.Add(int64(1), "-1", int64(0), "", false)
	f.Add(int64(2), "x", int64(7), "y", true)
	f.Fuzz(func(t *testing.T, flag int64, fence string, pttl int64, pos string, third bool) {
		for _, reply := range []any{
			[]any{flag, fence},
			[]any{flag, pttl},
			[]any{flag, pttl, pos},
			[]any{flag, fence, pos},
			[]any{flag},
			fence,
			nil,
		} {
			if !third {
				if arr, ok := reply.([]any); ok && len(arr) > 2 {
					reply = arr[:2]
				}
			}
			r, err := ParseAcquire(reply)
			if err != nil {
				if re := (*ReplyError)(nil); !errors.As(err, &re) {
					t.Errorf("parse error %v of %#v is not a *ReplyError (a reply dlock cannot read: permanent)", err, reply)
				}
				continue
			}
			if r.OK {
				want, perr := strconv.ParseUint(fence, 10, 64)
				arr := reply.([]any)
				if s, isString := arr[1].(string); isString && (perr != nil || want != r.Fence || s != fence) {
					t.Errorf("grant %#v parsed as fence %d", reply, r.Fence)
				}
			}
		}
	})
}

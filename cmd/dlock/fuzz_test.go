package main

import (
	"strings"
	"testing"
)

// FuzzRedisURL: no URL makes the parser panic, and no message shows the
// password of the URL it is about.
func FuzzRedisURL(f *testing.F) {
	for _, s := range []string{
		"redis://:s3cr3t-pw@127.0.0.1:6379/0",
		"rediss://user:s3cr3t-pw@host:6380",
		"127.0.0.1:6379",
		":s3cr3t-pw@127.0.0.1:6379",
		"redis://:s3cr3t-pw@127.0.0.1:port",
		"http://:s3cr3t-pw@127.0.0.1",
		"redis://127.0.0.1/x",
		"redis://[::1]:6379",
		"redis://:s3cr3t%40pw@h",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		opt, name, err := parseURL(raw)
		if err == nil && opt == nil {
			t.Fatalf("%q: no options and no error", raw)
		}
		pw := ""
		if opt != nil {
			pw = opt.Password
		} else if m := userinfo.FindStringSubmatch(raw); m != nil {
			pw = m[2]
		} else if m := userinfo.FindStringSubmatch("redis://" + raw); m != nil && !strings.Contains(raw, "://") {
			pw = m[2]
		}
		// A password too short, or that is also another part of the URL or
		// of the message's own words, cannot be told apart in a message:
		// the same URL with another password says whether it can.
		if len(pw) < 3 || strings.Count(raw, pw) > 1 {
			return
		}
		_, otherName, otherErr := parseURL(strings.Replace(raw, pw, "Q7zK9w", 1))
		if strings.Contains(otherName, pw) || (otherErr != nil && strings.Contains(otherErr.Error(), pw)) {
			return
		}
		if strings.Contains(name, pw) {
			t.Errorf("%q: the name %q shows the password", raw, name)
		}
		if err != nil && strings.Contains(err.Error(), pw) {
			t.Errorf("%q: the error %q shows the password", raw, err)
		}
	})
}

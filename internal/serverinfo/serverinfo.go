// Package serverinfo reads what dlock needs from the text of Redis' INFO
// command: a field's value, and the servers that two of a Redlock's
// addresses reach twice, told by their run ids (127.0.0.1:P and
// localhost:P, or a proxy in front of the server, are one server under two
// names). The library (NewRedlock's check at the first acquisition) and the
// CLI (its check of the URLs) share it.
package serverinfo

import "strings"

// Field is the value of field in INFO's text, or "" if it has none.
func Field(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// RunID is the server's run id (INFO's run_id, in its server section): a
// random name the server draws at each start, the same under every address
// it is reached by. It is "" when info has none.
func RunID(info string) string { return Field(info, "run_id") }

// Repeated returns the first two indexes i < j whose run ids are equal and
// not empty (an id that is not known is ""), and ok; ok is false when every
// known id is distinct.
func Repeated(ids []string) (i, j int, ok bool) {
	for j := range ids {
		for i := range j {
			if ids[j] != "" && ids[i] == ids[j] {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}

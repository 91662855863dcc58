package serverinfo

import "testing"

func TestField(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\n\r\n# Cluster\r\ncluster_enabled:0\r\n"
	for field, want := range map[string]string{"redis_version": "7.0.15", "run_id": "abc", "cluster_enabled": "0", "missing": ""} {
		if got := Field(info, field); got != want {
			t.Errorf("Field(%q) = %q, want %q", field, got, want)
		}
	}
	if got := RunID(info); got != "abc" {
		t.Errorf("RunID = %q", got)
	}
}

func TestRepeated(t *testing.T) {
	for _, tc := range []struct {
		ids  []string
		i, j int
		ok   bool
	}{
		{nil, 0, 0, false},
		{[]string{"a", "b", "c"}, 0, 0, false},
		{[]string{"", "b", ""}, 0, 0, false}, // unknown ids are not compared
		{[]string{"a", "b", "a"}, 0, 2, true},
		{[]string{"a", "b", "b", "a"}, 1, 2, true},
	} {
		i, j, ok := Repeated(tc.ids)
		if i != tc.i || j != tc.j || ok != tc.ok {
			t.Errorf("Repeated(%q) = %d, %d, %t; want %d, %d, %t", tc.ids, i, j, ok, tc.i, tc.j, tc.ok)
		}
	}
}

package main

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestTLSServerName: with the --tls-* flags, the TLS server name is left to
// each dial (the host it dials), which an IPv6 address, a Cluster's nodes
// and a master found by Sentinel need; it was cut from the address at the
// first ':', "[" for [::1]:6380 (found in review).
func TestTLSServerName(t *testing.T) {
	f, err := dlocktest.NewTLSFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rf := redisFlags{urls: urlList{"rediss://[::1]:6380"}, tlsCA: f.CA}
	tg, err := rf.open()
	if err != nil {
		t.Fatal(err)
	}
	defer tg.closeClients()
	got := tg.clients[0].(*redis.Client).Options().TLSConfig.ServerName
	if got != "" {
		t.Errorf("TLS ServerName for rediss://[::1]:6380 = %q, want none (the dialled host)", got)
	}
}

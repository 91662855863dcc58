module github.com/dlock-dev/dlock/extra/dlockvalkey

go 1.25.0

require (
	github.com/dlock-dev/dlock v0.1.0
	github.com/valkey-io/valkey-go v1.0.79
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/redis/go-redis/v9 v9.7.3 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace github.com/dlock-dev/dlock => ../..

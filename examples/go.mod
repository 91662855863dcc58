module github.com/dlock-dev/dlock/examples

go 1.26.0

require (
	github.com/dlock-dev/dlock v0.1.0
	github.com/dlock-dev/dlock/extra/dlocksql v0.1.0
	github.com/redis/go-redis/v9 v9.7.3
	modernc.org/sqlite v1.62.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)

replace (
	github.com/dlock-dev/dlock => ../
	github.com/dlock-dev/dlock/extra/dlocksql => ../extra/dlocksql
)

# dlock: see README.md.
GO ?= go

.PHONY: all build test demo bench redis vet

all: build

build:
	$(GO) build ./...

# Make sure redis-server is there (installed from Debian's package when
# missing and running as root), then vet and run every test under the race
# detector against real redis-server processes started by the tests.
test: redis
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

# The main job: start local redis-servers and show the lock at work.
demo: redis
	$(GO) run ./cmd/dlock demo

redis:
	@./scripts/dev/ensure-redis.sh

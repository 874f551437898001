# The two set-up commands of the README: `make demo` and `make test`.
GO ?= go

.PHONY: demo test lint redis

redis:
	./scripts/install-redis.sh

demo: redis
	$(GO) run ./cmd/dlock demo

test: redis
	$(GO) test -race -count=1 ./...

lint:
	test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest ./...

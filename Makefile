.PHONY: test dev build vet

# The whole test suite; starts the servers it needs.
test:
	bash scripts/test.sh

# The gateway in one process on embedded defaults.
dev:
	go run ./cmd/gateway dev

build:
	go build ./...

vet:
	go vet ./...

# Reclaim: the commands a newcomer needs, each one line of Go tooling.
#
#   make build   bin/registry (`go build ./cmd/registry` cannot work from the
#                root: the registry/ folder is where it would write the binary)
#   make run     the registry on the embedded default, http://127.0.0.1:5000
#   make test    every test (the command README.md and .ci/run give)
#   make ci      what CI runs on a fresh machine (needs root for apt)

VERSION  ?= dev
REVISION ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -X github.com/distribution/distribution/v3/version.mainpkg=github.com/reclaim-registry/reclaim \
            -X github.com/distribution/distribution/v3/version.version=$(VERSION) \
            -X github.com/distribution/distribution/v3/version.revision=$(REVISION)

.PHONY: build run test ci clean

build:
	go build -trimpath -ldflags "$(LDFLAGS)" -o bin/registry ./cmd/registry

run:
	go run ./cmd/registry serve configs/dev.yml

test:
	go test -race -count=1 ./...

ci:
	bash .ci/run

clean:
	rm -rf bin

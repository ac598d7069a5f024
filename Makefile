# brig: the two commands a newcomer needs are `make serve` and `make test`; both
# install what they need on a fresh Debian machine (as root).
# go from PATH, or where Go's own tarball installs it (sudo's PATH leaves that
# out).
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
BIN := bin/brig
# bin/brig-init is each sandbox's init (cmd/brig-init), which bin/brig uses when
# both carry the same build stamp; built without cgo, a static binary whose start
# skips the dynamic loader and the C library (about 1 ms of CPU per sandbox).
INIT_BIN := bin/brig-init
# bin/brig-reaper is the pid 1 of a zygote's sandbox (jail/reaper), a static
# executable without a C library, which bin/brig uses when both carry the same
# build stamp (otherwise bin/brig runs it from a constructor, at about 2 ms
# more CPU per sandbox).
REAPER_BIN := bin/brig-reaper
REAPER_CFLAGS := -O2 -Wall -static -nostdlib -ffreestanding -fno-builtin -fno-stack-protector -no-pie
STAMP := $(shell git rev-parse --short HEAD 2>/dev/null)-$(shell date +%s%N)
LDFLAGS := -X github.com/brig-sandbox/brig/jail/pid1.buildStamp=$(STAMP)
# urfave_cli_no_docs leaves out the CLI's man page generator, whose package
# initialisation every sandbox's init (this binary, re-executed) would pay.
TAGS := urfave_cli_no_docs

.PHONY: build deps test serve bench check clean

# deps installs the C library cgo links against (and pkg-config, through which
# libseccomp-golang finds it), and the interpreters, their
# package managers (the installers of runs' packages) and the tools the tests use,
# when they are missing.
deps:
	@missing=""; \
	for p in libseccomp-dev pkg-config gcc python3 python3-pip debootstrap iproute2; do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; \
	done; \
	[ -x /usr/bin/node ] || missing="$$missing nodejs"; \
	[ -x /usr/bin/npm ] || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

build: deps
	$(GO) build -tags $(TAGS) -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/brig
	CGO_ENABLED=0 $(GO) build -tags $(TAGS) -ldflags '$(LDFLAGS)' -o $(INIT_BIN) ./cmd/brig-init
	$(CC) $(REAPER_CFLAGS) -DREAPER_STANDALONE -DREAPER_STAMP='"$(STAMP)"' -o $(REAPER_BIN) jail/reaper/reaper.c

# test runs every test; the privileged ones need root (CI runs as root). The
# clients' tests run against bin/brig serve.
test: build
	$(GO) vet -tags $(TAGS) ./...
	$(GO) test -tags $(TAGS) -count=1 -timeout 20m ./...
	# The race detector over the packages whose concurrency is their own (the
	# proxy, the layer cache, the client): under a minute. The whole suite under
	# -race (about half an hour on two cores, 2026-12-06) is run by hand.
	$(GO) test -race -tags $(TAGS) -count=1 -timeout 20m ./egress/ ./packages/ ./client/
	cd clients/python && BRIG_BIN=$(CURDIR)/$(BIN) PYTHONPATH=src python3 -m unittest discover -s tests
	BRIG_BIN=$(CURDIR)/$(BIN) node --test clients/js/test/

# serve checks the host, then runs the service in the foreground with its embedded
# defaults (deploy/brig.toml lists them) on /run/brig/brig.sock. From another
# terminal (as root): ./bin/brig run --language python testdata/hello.py
serve: build
	./$(BIN) check
	exec ./$(BIN) serve

# bench starts a service of its own on a scratch socket for the service benchmark.
BENCH_DIR := /tmp/brig-bench
bench: build
	rm -rf $(BENCH_DIR) && mkdir -p $(BENCH_DIR)
	./$(BIN) serve --socket $(BENCH_DIR)/brig.sock --state-dir $(BENCH_DIR)/state --cgroup-parent brig-bench \
	  --max-concurrent 32 --log-level warn & pid=$$!; \
	  for i in $$(seq 100); do [ -S $(BENCH_DIR)/brig.sock ] && break; sleep 0.1; done; \
	  ./$(BIN) bench --socket $(BENCH_DIR)/brig.sock -c 1 -n 200 --rounds 4; \
	  ./$(BIN) bench --socket $(BENCH_DIR)/brig.sock -c 1 -n 100 --spacing 50ms --rounds 4; \
	  ./$(BIN) bench --socket $(BENCH_DIR)/brig.sock -c 2 -n 300 --rounds 5 --rss-runs 32; \
	  ./$(BIN) bench --socket $(BENCH_DIR)/brig.sock -c 8 -n 300 --rounds 5; \
	  kill -TERM $$pid; wait $$pid
	./$(BIN) bench --local -n 200
	./$(BIN) bench --local -n 200 --pool 2
	./$(BIN) bench --local -n 100 --pool 2 --spacing 50ms
	./$(BIN) bench --local -n 100 --spacing 50ms
	./$(BIN) bench --local -n 100 --pool 2 --heap-mib 1024

check: build
	./$(BIN) check

clean:
	rm -rf bin

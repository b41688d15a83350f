# QuicMQ. `make test` is what CI runs (see .ci/run); `make dev` starts a local broker.
GO ?= go
FUZZTIME ?= 5s
# Go 1.26.10 fixes standard-library vulnerabilities govulncheck finds reachable on 1.26.8; the
# go command fetches it from the module proxy (~76 MB, once). It overrides a local setting.
export GOTOOLCHAIN := go1.26.10

.PHONY: build dev test vet unit fuzz-short fuzz bench bench-smoke campaigns-short clean vulncheck tofu-check broken

# `quicmq version` prints the release name (from internal/release/RELEASES: a release's name
# when the commit built is one, else the latest release's with "+dev"), the commit and the Go
# version. VERSION=NAME overrides the name; COMMIT is printed when go build records no commit
# itself (GOFLAGS=-buildvcs=false, a source tarball).
VERSION ?=
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)

build:
	$(GO) build -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o bin/quicmq ./cmd/quicmq

dev: build
	./bin/quicmq dev

# The whole suite: vet, unit and integration tests with the race detector, then each fuzz
# target briefly.
test: vet unit fuzz-short bench-smoke campaigns-short

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

# Each fuzz target for FUZZTIME (CI: seconds each; locally e.g. make fuzz FUZZTIME=10m).
fuzz-short:
	@./scripts/fuzz.sh $(FUZZTIME)

fuzz:
	@./scripts/fuzz.sh $(FUZZTIME)

# The bench/ module (its own go.mod: NATS is never a dependency of QuicMQ): vet, and a few
# seconds of the fan-out scenario per system at 1% loss (~15 s once built), and the shared-stream
# ablation's client with the race detector. The harness tests skip unless run as root with
# nftables installed (see docs/benchmarks.md).
bench-smoke:
	cd bench && $(GO) vet ./... && $(GO) test -short -count=1 -timeout 5m ./lossy/... ./cmd/... && \
		$(GO) test -race -count=1 -timeout 5m ./sharedstream/...

# The network campaigns 3 and 4 (bench/campaign: partitions, packet loss, gossip under 20 %
# loss) in their short default form, ~100 s; they skip without root, nft and ip.
# scripts/campaign.sh runs them at length.
campaigns-short:
	cd bench && $(GO) test -count=1 -timeout 15m ./campaign

# Every deliberately broken build against the checker that must catch it (scripts/broken.sh
# lists them); on demand, a few minutes each.
broken:
	@./scripts/broken.sh

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./wal ./node ./routing ./internal/wire

# govulncheck against the vulnerability database from the module proxy (offline from
# vuln.go.dev); exits 3 when the code calls a known-vulnerable symbol.
vulncheck:
	@./scripts/vulncheck.sh

# Terraform: fmt, validate, plan and tofu test of terraform/ against the real provider
# schemas, offline (OpenTofu and a stub provider built from tools/, cached in ~/.cache/quicmq).
tofu-check:
	@./scripts/tofu-check.sh

clean:
	rm -rf bin

# QuicMQ. `make test` is what CI runs (see .ci/run); `make dev` starts a local broker.
GO ?= go
FUZZTIME ?= 5s
# Go 1.26.10 fixes standard-library vulnerabilities govulncheck finds reachable on 1.26.8; the
# go command fetches it from the module proxy (~76 MB, once). It overrides a local setting.
export GOTOOLCHAIN := go1.26.10

.PHONY: build dev test vet unit fuzz-short fuzz bench clean vulncheck tofu-check

build:
	$(GO) build -o bin/quicmq ./cmd/quicmq

dev: build
	./bin/quicmq dev

# The whole suite: vet, unit and integration tests with the race detector, then each fuzz
# target briefly.
test: vet unit fuzz-short

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

# skewgate — see README.md. Everything that needs the lab or the kernel runs
# as root; `make test` runs it all.
GO        ?= go
BIN       := bin
LAB_DIR   ?= .lab
NODES     ?= node-a=v1.35.4,node-b=v1.36.3
SKEWGATE  ?= off
GOTEST    := $(GO) test -count=1 -timeout 40m

.PHONY: all build test unit lab-build lab-up lab-down demo bench fmt vet

all: build

build:
	$(GO) build -o $(BIN)/skewgate ./cmd/skewgate
	$(GO) build -o $(BIN)/skewlab ./cmd/skewlab

# The lab's kube-apiservers are built first, on their own, so their
# minutes-long first build shows its progress instead of hiding in go test.
lab-build: build
	$(BIN)/skewlab build

test: vet lab-build
	$(GOTEST) ./...

unit:
	$(GOTEST) -short ./...

vet:
	$(GO) vet ./...

lab-up: lab-build
	$(BIN)/skewlab up --dir $(LAB_DIR) --nodes $(NODES)

lab-down: build
	$(BIN)/skewlab down --dir $(LAB_DIR)

demo: lab-build
	./deploy/demo.sh

bench: lab-build
	$(GO) test -run '^$$' -bench . -benchtime 200x ./e2e/

fmt:
	gofmt -l -w .

# skewgate — see README.md. Everything that needs the lab or the kernel runs
# as root; `make test` runs it all.
GO        ?= go
BIN       := bin
LAB_DIR   ?= .lab
NODES     ?= node-a=v1.35.4,node-b=v1.36.3
SKEWGATE  ?= off
GOTEST    := $(GO) test -count=1 -timeout 40m

# RELEASE is the release the manifests name (deploy/kubernetes: images:);
# tagging a commit with it makes `make image` build exactly that tag.
RELEASE    := v0.1.0
# skewgate version: the newest v* tag (described: vX-N-g<commit> after it),
# or $(RELEASE)-<commit> before any tag; the build date is the commit's, so
# a build of one commit is reproducible.
VERSION    ?= $(shell git describe --tags --match 'v*' --dirty 2>/dev/null || echo $(RELEASE)-$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown))
COMMIT     ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILD_DATE ?= $(shell git log -1 --format=%cI 2>/dev/null || echo unknown)
# Expanded once, so an image's label and its binary's version agree even if
# HEAD moves during a build.
VERSION    := $(VERSION)
COMMIT     := $(COMMIT)
BUILD_DATE := $(BUILD_DATE)
LDFLAGS    := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(BUILD_DATE)
# Where skewgate's image is published (deploy/kubernetes.DefaultRepository,
# which the manifests name): make image names its archive's image there.
REPOSITORY ?= ghcr.io/skewgate/skewgate

.PHONY: version all build test test-deps lab-build lab-up lab-down demo bench bench-micro fmt vet fuzz soak scale upgrade-drill image release lab-deploy kubelet-packages

all: build

# The version `make image` tags the image with.
version:
	@echo $(VERSION)

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/skewgate ./cmd/skewgate
	$(GO) build -o $(BIN)/kubectl-skewgate ./cmd/kubectl-skewgate
	$(GO) build -o $(BIN)/skewlab ./cmd/skewlab

# skewgate's OCI image archive, $(REPOSITORY):$(VERSION): an image index for
# linux/amd64 and linux/arm64, each a static binary on no base, built
# without a container daemon, and its SPDX SBOM (bin/skewgate-image.spdx.json,
# from the modules the binaries link); the same commit gives the same
# digest. Import with `ctr -n k8s.io images import bin/skewgate-image.tar`
# (the node's platform).
image: build
	$(BIN)/skewlab image --version $(VERSION) --revision $(COMMIT) --created $(BUILD_DATE) \
		--ldflags '-s -w $(LDFLAGS)' --repository $(REPOSITORY) --out $(BIN)/skewgate-image.tar

# A release of the clean tree at one commit (docs/release.md), into
# bin/release/$(VERSION) (git-ignored: never commit it): the image archive
# as `make image` builds it, its SBOM and SLSA provenance, a cosign
# signature of its digest, the packaged chart and index.yaml, the kustomize
# and static-pod manifests naming REPOSITORY:VERSION@sha256:…, SHA256SUMS
# and its signature; then checked as an operator would. VERSION must be
# given (vX.Y.Z); RELEASE_KEY is the signing key's file (default:
# $$SKEWGATE_RELEASE_KEY holds it); DRY_RUN=on signs with a throwaway key
# into bin/release/$(VERSION)-dry-run (make test runs it: deploy/release).
RELEASE_KEY ?=
DRY_RUN     ?= off
release: build
	@case "$(origin VERSION)" in "command line"|environment*) ;; \
		*) echo "make release: name the release: make release VERSION=vX.Y.Z (docs/release.md)" >&2; exit 2;; esac
	$(BIN)/skewlab release --version $(VERSION) --repository $(REPOSITORY) \
		$(if $(RELEASE_KEY),--key-file $(RELEASE_KEY),) $(if $(filter on,$(DRY_RUN)),--dry-run,)

# The lab's kube-apiservers are built first, on their own, so their
# minutes-long first build shows its progress instead of hiding in go test.
lab-build: build
	$(BIN)/skewlab build $(if $(filter on,$(KUBELET)),--kubelet,) $(if $(filter on,$(KUBEADM)),--kubeadm,)

# The kubelet and kubeadm labs' binaries too (e2e/daemonset,
# e2e/kubeadm), helm (deploy/helm's lint and render), cosign (the release's
# signature, deploy/release) and the next upgrade's apiserver (e2e/next),
# so their first build shows its progress here.
test: test-deps vet build
	$(BIN)/skewlab build --kubelet --kubeadm --helm --cosign
	$(BIN)/skewlab build --versions v1.37.2
	$(GOTEST) ./...

vet:
	$(GO) vet ./...

# What `make test` needs from Debian: the BPF toolchain (clang, llvm,
# bpftool, libbpf headers), ip, Prometheus (promtool, the dashboard and
# alert checks), and the kubelet and kubeadm labs' containerd, runc and CNI
# plugins. As root with apt-get, whatever is missing is installed, and bpffs
# is mounted for the pinned maps; otherwise the missing packages are named
# at the start, and the tests that need them skip (fail under CI=true).
# Silent when everything is there.
TEST_PACKAGES := clang llvm bpftool libbpf-dev iproute2 prometheus containerd runc containernetworking-plugins
test-deps:
	@need=; for p in $(TEST_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || need="$$need $$p"; \
	done; \
	if [ -n "$$need" ]; then \
		if [ "$$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then \
			echo "test-deps: missing$$need (not root, or no apt-get): the tests that need them will skip (fail under CI=true)" >&2; \
		else \
			echo "test-deps: installing$$need"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$need; \
		fi; \
	fi
	@if [ "$$(id -u)" -eq 0 ] && ! mountpoint -q /sys/fs/bpf; then mount -t bpf bpf /sys/fs/bpf; fi

# SKEWGATE=on runs skewgate on every node, steering the node's IP:6443.
LAB_SKEWGATE := $(if $(filter on,$(SKEWGATE)),--skewgate $(BIN)/skewgate,)
# KUBELET=on runs containerd and a kubelet on every node (control-plane
# role and taint), a controller-manager and a scheduler, with skewgate's
# image (make image) imported: then `kubectl apply -k deploy/kubernetes`.
KUBELET   ?= off
# KUBEADM=on builds the plane with kubeadm itself (init, join
# --control-plane, static pods of lab-built images, a VIP), on kubelets as
# KUBELET=on runs them; `make lab-deploy` works on it too.
KUBEADM   ?= off
LAB_KUBELET := $(if $(filter on,$(KUBELET)),--kubelet --image $(BIN)/skewgate-image.tar,)$(if $(filter on,$(KUBEADM)),--kubeadm --image $(BIN)/skewgate-image.tar,)
LAB_UP_DEPS := lab-build $(if $(filter on,$(KUBELET))$(filter on,$(KUBEADM)),image kubelet-packages,)

lab-up: $(LAB_UP_DEPS)
	$(BIN)/skewlab up --dir $(LAB_DIR) --nodes $(NODES) $(LAB_SKEWGATE) $(LAB_KUBELET)

# skewgate's DaemonSet (deploy/kubernetes, the tag of `make image`) on a
# KUBELET=on lab.
lab-deploy: build
	$(BIN)/skewlab deploy --dir $(LAB_DIR) --repository $(REPOSITORY) --tag $(VERSION)

# What the kubelet mode runs from Debian: containerd, runc, the CNI
# loopback plugin.
kubelet-packages:
	@if ! command -v containerd >/dev/null || ! command -v runc >/dev/null || ! test -x /usr/lib/cni/loopback; then \
		apt-get update && apt-get install -y --no-install-recommends containerd runc containernetworking-plugins; \
	fi

lab-down: build
	$(BIN)/skewlab down --dir $(LAB_DIR)

# The rolling upgrade and rollback, in every mode, on the kubeadm lab
# (kubeadm upgrade apply/node, kubelets, the rollback from kubeadm's
# backups, skewgate's DaemonSet of make image, the real controllers);
# writes docs/upgrade-drill.md and docs/drill/*.png. Needs the Debian
# package prometheus for the dashboard and alert checks. FAST=on runs the
# binary-swap drill instead (the lab's own processes, each apiserver's
# binary swapped; no kubeadm, kubelets or controllers). DRILL_MODES picks
# modes (comma-separated, as skewlab drill --help lists them).
# FROM and TO pick the upgrade (skewlab drill --help lists the pairs):
# FROM=v1.36.3 TO=v1.37.2 is the next one, both sides on their defaults.
# KCM_LB=on points the controller-managers at an L4 load balancer over the
# nodes: the garbage collector's case. KUBEADM=on is accepted (the default).
# GOAWAY_CHANCE=0.02 runs every apiserver with --goaway-chance=0.02, as the
# docs advise for an upgrade (empty: kube-apiserver's default, unset).
DRILL_MODES ?=
GOAWAY_CHANCE ?=
FROM      ?= v1.35.4
TO        ?= v1.36.3
FAST      ?= off
DRILL_KUBEADM := $(if $(filter on,$(FAST)),,on)
upgrade-drill: build $(if $(DRILL_KUBEADM),image kubelet-packages,)
	@command -v prometheus >/dev/null || { apt-get update && apt-get install -y prometheus; }
	$(BIN)/skewlab build --versions $(FROM),$(TO) $(if $(DRILL_KUBEADM),--kubeadm,)
	$(BIN)/skewlab drill --dir $(LAB_DIR) --from $(FROM) --to $(TO) --skewgate $(BIN)/skewgate $(if $(DRILL_MODES),--modes '$(DRILL_MODES)',) \
		$(if $(DRILL_KUBEADM),--image $(BIN)/skewgate-image.tar --tag $(VERSION),--fast) $(if $(filter on,$(KCM_LB)),--controller-manager-lb,) \
		$(if $(GOAWAY_CHANCE),--goaway-chance $(GOAWAY_CHANCE),)

demo: lab-build
	./deploy/demo.sh

# The one table: skewgate against direct, HAProxy (TCP) and the in-tree
# proxy on the lab, side by side; prints it and writes docs/benchmarks.md
# and docs/bench/latency.png. Needs the Debian package haproxy.
bench: lab-build
	@command -v haproxy >/dev/null || { apt-get update && apt-get install -y haproxy; }
	$(GO) test -count=1 -run '^$$' -bench Table -benchtime 1x -timeout 30m ./lab/bench/ -args -out $(CURDIR)/docs $(if $(PROFILE),-profile $(PROFILE))

# Micro-benchmarks that need no lab: routing, merged discovery, the
# in-process hop and its allocations.
bench-micro:
	$(GO) test -run '^$$' -bench . -benchmem ./proxy/...

# SOAK_WATCHES watches (default 500) + SOAK_RATE requests a second (default
# 200) through skewgate for SOAK_DURATION (default 60s), node-b stopped and
# started in the middle; prints outcomes and vitals.
soak: lab-build
	$(GO) test -count=1 -run '^$$' -bench Soak -benchtime 1x -timeout 20m ./lab/e2e/

# Issue 23's scale test: SCALE_WATCHES real client-go watches (default
# 10000) and SCALE_RATE requests a second (default 200) through node-a's
# skewgate, run with the DaemonSet's memory limit, and the same load
# direct to node-a, while node-a's apiserver restarts gracefully twice and
# crashes once (SCALE_PHASE apart, default 40s); SCALE_CLIENTS clients per
# side carry the watches (default one per 50), SCALE_SIDES=skewgate or
# direct runs one side. Writes the "Scale" section of docs/benchmarks.md.
SCALE_WATCHES ?= 10000
SCALE_RATE    ?= 200
scale: lab-build
	SCALE_WATCHES=$(SCALE_WATCHES) SCALE_RATE=$(SCALE_RATE) SCALE_DOCS=$(CURDIR)/docs \
		$(GO) test -count=1 -run '^$$' -bench Scale -benchtime 1x -timeout 60m ./lab/e2e/

fmt:
	gofmt -l -w .

# Each fuzz target for FUZZTIME; `make test` runs their seed corpora. Large
# seeds (real discovery documents) make minimization crawl, hence 1x.
FUZZTIME ?= 60s
FUZZ_TARGETS := FuzzClassifyDecide:./proxy/route FuzzAggregatedDocument:./proxy/discovery \
	FuzzOpenAPIRoots:./proxy/discovery FuzzStateFile:./proxy/membership FuzzRequest:./proxy
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t%%:*}$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 1x $${t#*:} || exit 1; \
	done

# --- bpf: generated Go bindings for the programs under bpf/ -----------------
# The bpf2go output (bpf/*/*_bpfel.{go,o}) is committed so that go build and
# go test need no clang. `make generate` rebuilds it; with the same clang and
# libbpf headers the output is byte-for-byte identical.
# bpf/include/vmlinux.h is trimmed by hand and not regenerated here.
.PHONY: generate bpf-toolchain
generate: bpf-toolchain
	$(GO) generate ./bpf/...

# bpf-toolchain installs clang, llvm, bpftool and libbpf headers when missing.
bpf-toolchain:
	@if ! command -v clang >/dev/null || ! command -v bpftool >/dev/null || ! test -e /usr/include/bpf/bpf_helpers.h; then \
		apt-get update && apt-get install -y clang llvm bpftool libbpf-dev; \
	fi

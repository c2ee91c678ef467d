package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/skewgate/skewgate/proxy/forward"
)

// MemoryLimitEnv names the container's memory limit in bytes, as the
// DaemonSet's downward API sets it (resourceFieldRef limits.memory; the
// node's allocatable memory when the container has no limit).
const MemoryLimitEnv = "SKEWGATE_MEMORY_LIMIT"

// fallbackSoftLimit is the soft memory limit when no container limit can
// be read: what a 128 MiB container would get.
const fallbackSoftLimit = 96 << 20

// cgroup files that hold the container's memory limit, v2 then v1.
var cgroupLimitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// tuneGC trades memory for CPU where the operator set nothing: skewgate's
// live heap is small (tens of MiB) and it shares the node's CPUs with
// kube-apiserver, so it lets the heap grow to 3x the live heap instead of
// 2x between collections, but collects harder as Go's memory nears 3/4 of
// the container's limit: an OOM kill would reset every connection through
// skewgate, so the GC gives way before the kernel does. A quarter of that
// soft limit bounds the callers' bodies kept to be sent again. GOGC and
// GOMEMLIMIT override either.
func tuneGC(log *slog.Logger) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
	soft, source := softMemoryLimit(os.Getenv, os.ReadFile)
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(soft)
	} else {
		soft, source = debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	}
	forward.SetReplayBudget(soft / 4)
	log.Info("memory", "softLimitBytes", soft, "from", source, "replayBudgetBytes", soft/4)
}

// softMemoryLimit is 3/4 of the container's memory limit, read from
// MemoryLimitEnv, else from the cgroup, else fallbackSoftLimit; source
// says which.
func softMemoryLimit(getenv func(string) string, readFile func(string) ([]byte, error)) (int64, string) {
	if v := getenv(MemoryLimitEnv); v != "" {
		if limit, err := parseLimit(v); err == nil {
			return limit / 4 * 3, MemoryLimitEnv
		}
	}
	for _, f := range cgroupLimitFiles {
		b, err := readFile(f)
		if err != nil {
			continue
		}
		// v2 says "max", v1 a huge number, for no limit.
		if limit, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && limit > 0 && limit < 1<<50 {
			return limit / 4 * 3, f
		}
	}
	return fallbackSoftLimit, "default"
}

// parseLimit reads a memory limit: bytes, or a quantity ("256Mi").
func parseLimit(v string) (int64, error) {
	q, err := resource.ParseQuantity(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", MemoryLimitEnv, v, err)
	}
	if q.Value() <= 0 {
		return 0, fmt.Errorf("%s=%q: not a positive size", MemoryLimitEnv, v)
	}
	return q.Value(), nil
}

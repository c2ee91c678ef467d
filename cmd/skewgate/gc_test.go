package main

import (
	"errors"
	"os"
	"testing"
)

// The soft memory limit follows the container's: 3/4 of what the downward
// API says, else of the cgroup's limit, else 96 MiB.
func TestSoftMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    string
		files  map[string]string
		want   int64
		source string
	}{
		{"the DaemonSet's 256 MiB, in bytes", "268435456", nil, 192 << 20, MemoryLimitEnv},
		{"a quantity", "1Gi", nil, 768 << 20, MemoryLimitEnv},
		{"cgroup v2", "", map[string]string{"/sys/fs/cgroup/memory.max": "536870912\n"}, 384 << 20, "/sys/fs/cgroup/memory.max"},
		{"cgroup v2 without a limit, v1 with one", "", map[string]string{"/sys/fs/cgroup/memory.max": "max\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "134217728\n"}, 96 << 20, "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
		{"cgroup v1 without a limit", "", map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, fallbackSoftLimit, "default"},
		{"garbage in the variable", "lots", map[string]string{"/sys/fs/cgroup/memory.max": "268435456"}, 192 << 20, "/sys/fs/cgroup/memory.max"},
		{"nothing", "", nil, fallbackSoftLimit, "default"},
	} {
		getenv := func(k string) string {
			if k == MemoryLimitEnv {
				return tc.env
			}
			return ""
		}
		readFile := func(name string) ([]byte, error) {
			if v, ok := tc.files[name]; ok {
				return []byte(v), nil
			}
			return nil, errors.Join(os.ErrNotExist, errors.New(name))
		}
		got, source := softMemoryLimit(getenv, readFile)
		if got != tc.want || source != tc.source {
			t.Errorf("%s: %d from %s, want %d from %s", tc.name, got, source, tc.want, tc.source)
		}
	}
}

package agent

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/skewgate/skewgate/bpf/steer"
)

// reasonName is the label for a steer_counters index: the C enum name
// without its prefix, lower case ("lease_expired").
func reasonName(r steer.SteerReason) string {
	switch r {
	case steer.SteerReasonREASON_NOT_TARGET:
		return "not_target"
	case steer.SteerReasonREASON_STEERED:
		return "steered"
	case steer.SteerReasonREASON_OFF:
		return "off"
	case steer.SteerReasonREASON_LEASE_EXPIRED:
		return "lease_expired"
	case steer.SteerReasonREASON_EXEMPT:
		return "exempt"
	case steer.SteerReasonREASON_NO_SOCKET:
		return "no_socket"
	case steer.SteerReasonREASON_ASSIGN_ERROR:
		return "assign_error"
	case steer.SteerReasonREASON_HELD:
		return "held"
	}
	return strings.ToLower(fmt.Sprintf("reason_%d", r))
}

// readReasons sums the per-CPU steer_counters.
func readReasons(m *ebpf.Map) (map[string]uint64, error) {
	out := make(map[string]uint64, steer.SteerReasonREASON_MAX)
	for r := steer.SteerReason(0); r < steer.SteerReasonREASON_MAX; r++ {
		var perCPU []uint64
		if err := m.Lookup(uint32(r), &perCPU); err != nil {
			return nil, fmt.Errorf("read steer_counters[%d]: %w", r, err)
		}
		var sum uint64
		for _, n := range perCPU {
			sum += n
		}
		out[reasonName(r)] = sum
	}
	return out, nil
}

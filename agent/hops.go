package agent

import (
	"fmt"
	"math"
	"net/netip"

	"github.com/skewgate/skewgate/bpf/connstat"
)

// histBuckets is HIST_BUCKETS in bpf/connstat/connstat.c.
const histBuckets = 26

// Hop names, as the "hop" label.
const (
	HopClientProxy = "client_to_proxy"
	HopProxyLocal  = "proxy_to_local"
	HopProxyPeer   = "proxy_to_peer"
)

func hopName(h connstat.ConnstatHop) string {
	switch h {
	case connstat.ConnstatHopHOP_CLIENT_PROXY:
		return HopClientProxy
	case connstat.ConnstatHopHOP_PROXY_LOCAL:
		return HopProxyLocal
	case connstat.ConnstatHopHOP_PROXY_PEER:
		return HopProxyPeer
	}
	return fmt.Sprintf("hop_%d", h)
}

// Log2Histogram is a connstat histogram: Buckets[b] counts values in
// [2^b, 2^(b+1)) µs, the last bucket everything from 2^(histBuckets-1) µs.
type Log2Histogram struct {
	Buckets   [histBuckets]uint64
	SumMicros uint64
}

// Count is the number of observations.
func (h Log2Histogram) Count() uint64 {
	var n uint64
	for _, b := range h.Buckets {
		n += b
	}
	return n
}

// Cumulative converts the log2 buckets into Prometheus' cumulative buckets,
// keyed by upper bound in seconds.
//
// The kernel computes bucket b = floor(log2(µs)) from a value truncated to
// whole microseconds, so a value in bucket b was below 2^(b+1) µs before
// truncation as well: le = 2^(b+1) µs is exact, not an approximation. The
// last bucket is open ended and only counts toward +Inf (the count).
func (h Log2Histogram) Cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, histBuckets-1)
	var cum uint64
	for b := 0; b < histBuckets-1; b++ {
		cum += h.Buckets[b]
		out[math.Ldexp(1, b+1)/1e6] = cum
	}
	return out
}

// Quantile estimates a quantile in µs, as the upper bound of the bucket it
// falls in; for tests and reports.
func (h Log2Histogram) Quantile(q float64) float64 {
	total := h.Count()
	if total == 0 {
		return math.NaN()
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var cum uint64
	for b, n := range h.Buckets {
		cum += n
		if cum >= rank {
			return math.Ldexp(1, b+1)
		}
	}
	return math.Inf(1)
}

// HopStats are the kernel's counts for one hop and server.
type HopStats struct {
	Hop string
	// Server is the remote apiserver for proxy hops, and the address the
	// client dialled for client_to_proxy.
	Server      netip.AddrPort
	Opens       uint64
	Closes      uint64
	Failed      uint64
	Retransmits uint64
	Handshake   Log2Histogram
	MinRTT      Log2Histogram
	// SRTT samples open connections' smoothed RTT at most once a second
	// each. The kernel keeps no sum for it: SumMicros is estimated from
	// the buckets (each value at its bucket's geometric middle).
	SRTT Log2Histogram
}

// estimateSum fills SumMicros from the buckets: a value in [2^b, 2^(b+1))
// µs counts as 2^b·√2.
func (h *Log2Histogram) estimateSum() {
	var sum float64
	for b, n := range h.Buckets {
		sum += float64(n) * math.Ldexp(math.Sqrt2, b)
	}
	h.SumMicros = uint64(sum)
}

type hopID struct {
	hop    connstat.ConnstatHop
	server netip.AddrPort
}

func hopIDFrom(k connstat.ConnstatHopKey) hopID {
	addr := netip.AddrFrom16(k.Addr).Unmap()
	return hopID{hop: k.Hop, server: netip.AddrPortFrom(addr, k.Port)}
}

// Snapshot reads every hop's counters and histograms, summing the per-CPU
// values.
func (c *ConnStat) Snapshot() ([]HopStats, error) {
	if c.Status().State == StateDisabled {
		return nil, c.Status().Err
	}
	hops := map[hopID]*HopStats{}
	get := func(id hopID) *HopStats {
		if h, ok := hops[id]; ok {
			return h
		}
		h := &HopStats{Hop: hopName(id.hop), Server: id.server}
		hops[id] = h
		return h
	}
	if err := c.readCounters(get); err != nil {
		return nil, err
	}
	if err := c.readHist(get); err != nil {
		return nil, err
	}
	out := make([]HopStats, 0, len(hops))
	for _, h := range hops {
		h.SRTT.estimateSum()
		out = append(out, *h)
	}
	return out, nil
}

func (c *ConnStat) readCounters(get func(hopID) *HopStats) error {
	var k connstat.ConnstatHopKey
	var perCPU []connstat.ConnstatHopCounters
	it := c.objs.ConnstatCounters.Iterate()
	for it.Next(&k, &perCPU) {
		h := get(hopIDFrom(k))
		for _, v := range perCPU {
			h.Opens += v.Opens
			h.Closes += v.Closes
			h.Failed += v.Failed
			h.Retransmits += v.Retransmits
			h.Handshake.SumMicros += v.HandshakeUsSum
			h.MinRTT.SumMicros += v.MinRttUsSum
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read connstat_counters: %w", err)
	}
	return nil
}

func (c *ConnStat) readHist(get func(hopID) *HopStats) error {
	var k connstat.ConnstatHistKey
	var perCPU []uint64
	it := c.objs.ConnstatHist.Iterate()
	for it.Next(&k, &perCPU) {
		if k.Bucket >= histBuckets {
			continue
		}
		h := get(hopIDFrom(k.Hop))
		hist := &h.Handshake
		switch k.Metric {
		case connstat.ConnstatMetricMETRIC_MIN_RTT:
			hist = &h.MinRTT
		case connstat.ConnstatMetricMETRIC_SRTT:
			hist = &h.SRTT
		}
		for _, n := range perCPU {
			hist.Buckets[k.Bucket] += n
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read connstat_hist: %w", err)
	}
	return nil
}

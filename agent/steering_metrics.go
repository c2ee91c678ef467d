package agent

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descSteeringState = prometheus.NewDesc("skewgate_steering_state",
		"1 for the current steering state: disabled, off (kill switch), standby (not wanted: mode auto outside a skew window, or mode off), lapsed or steering.",
		[]string{"state"}, nil)
	descSteeringLease = prometheus.NewDesc("skewgate_steering_lease_remaining_seconds",
		"Time left on the steering lease; 0 when lapsed.", nil, nil)
	descSteeringLookups = prometheus.NewDesc("skewgate_steering_lookups_total",
		"sk_lookup runs in the node's network namespace by outcome (steered, off, lease_expired, exempt, no_socket, assign_error, held, not_target).",
		[]string{"reason"}, nil)
	steerRunSeconds = descProgRunSeconds("steer")
	steerRuns       = descProgRuns("steer")
	steerErrors     = descCollectionErrors("steer")
)

var allStates = []StateName{StateDisabled, StateOff, StateStandby, StateLapsed, StateSteering}

// Describe implements prometheus.Collector.
func (s *Steering) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSteeringState, descSteeringLease, descSteeringLookups, steerRunSeconds, steerRuns, steerErrors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector; it reads the maps at scrape time.
func (s *Steering) Collect(ch chan<- prometheus.Metric) {
	st := s.Status()
	if st.State != StateDisabled && st.State != StateStandby {
		s.setStatus(st.Err) // fresh kill switch and lease, keep the last check's error
		st = s.Status()
	}
	for _, name := range allStates {
		v := 0.0
		if name == st.State {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descSteeringState, prometheus.GaugeValue, v, string(name))
	}
	ch <- prometheus.MustNewConstMetric(descSteeringLease, prometheus.GaugeValue, st.LeaseRemaining.Seconds())
	if st.State != StateDisabled {
		s.collectKernel(ch)
	}
	ch <- prometheus.MustNewConstMetric(steerErrors, prometheus.CounterValue, s.errs.load())
}

func (s *Steering) collectKernel(ch chan<- prometheus.Metric) {
	reasons, err := readReasons(s.objs.SteerCounters)
	if err != nil {
		s.errs.inc()
	}
	for name, n := range reasons {
		ch <- prometheus.MustNewConstMetric(descSteeringLookups, prometheus.CounterValue, float64(n), name)
	}
	if err := progStats(ch, s.objs.Steer, steerRunSeconds, steerRuns); err != nil {
		s.errs.inc()
	}
}

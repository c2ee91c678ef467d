package agent

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// StateName names a steering state in Status and metrics.
type StateName string

const (
	// StateDisabled: steering could not be installed; Status.Err says why.
	StateDisabled StateName = "disabled"
	// StateOff: the operator's kill switch is off.
	StateOff StateName = "off"
	// StateLapsed: installed and on, but the last check failed; the lease
	// lapses (or has lapsed) and connections fall back.
	StateLapsed StateName = "lapsed"
	// StateSteering: new connections to the targets reach the proxy.
	StateSteering StateName = "steering"
	// StateStandby: installed, not wanted now (mode auto outside a skew
	// window, or mode off): new connections reach the apiserver directly.
	StateStandby StateName = "standby"
	// StateRunning: connstat is attached and counting.
	StateRunning StateName = "running"
)

// Status is the state of a Steering.
type Status struct {
	State StateName
	// Err is why steering is disabled or lapsed. For StateDisabled it wraps
	// ErrNotPermitted, ErrNotSupported or ErrLayout when one applies.
	Err error
	// LeaseRemaining is the time left on the lease at the last check.
	LeaseRemaining time.Duration
	// Why steering is or is not wanted (the mode, the skew window).
	Why string
}

// String reads like "steering disabled: not permitted: ...".
func (s Status) String() string {
	switch s.State {
	case StateDisabled, StateLapsed:
		return fmt.Sprintf("steering %s: %v", s.State, s.Err)
	case StateOff:
		return "steering off (kill switch)"
	case StateStandby:
		return "steering standby: " + s.Why
	case StateRunning:
		return "running"
	}
	if s.Why != "" {
		return fmt.Sprintf("steering on (lease %s): %s", s.LeaseRemaining.Round(time.Millisecond), s.Why)
	}
	return fmt.Sprintf("steering on (lease %s)", s.LeaseRemaining.Round(time.Millisecond))
}

// Status returns the current state.
func (s *Steering) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// standby records that steering is not wanted now, and why; the kill
// switch still shows as off.
func (s *Steering) standby(why string) {
	st := Status{State: StateStandby, Why: why}
	if !s.conf.Enabled() {
		st.State = StateOff
	}
	s.change(st)
}

func (s *Steering) setStatus(checkErr error) {
	_, why := s.cfg.Want()
	st := Status{State: StateSteering, Err: checkErr, Why: why}
	if lease := s.conf.LeaseUntil(); lease > monotonicNow() {
		st.LeaseRemaining = time.Duration(lease - monotonicNow())
	}
	switch {
	case !s.conf.Enabled():
		st.State = StateOff
	case checkErr != nil:
		st.State = StateLapsed
	case st.LeaseRemaining == 0:
		st.State = StateLapsed
		st.Err = errors.New("lease lapsed")
	}
	s.change(st)
}

func (s *Steering) change(st Status) {
	s.mu.Lock()
	prev := s.status
	s.status = st
	s.mu.Unlock()
	if prev.State != st.State {
		s.logChange(prev, st)
	}
	if st.State != StateSteering || s.cfg.OnEngage == nil {
		return
	}
	switch {
	case prev.State == StateStandby || prev.State == "":
		go s.cfg.OnEngage(true)
	case prev.State == StateSteering && prev.Why != st.Why:
		go s.cfg.OnEngage(false)
	}
}

// logChange tells the operator of a change of state, once: engaged,
// lapsed (and why), turned off by the kill switch.
func (s *Steering) logChange(prev, st Status) {
	log := s.cfg.Log.With("from", string(prev.State), "targets", s.cfg.Targets)
	switch st.State {
	case StateSteering:
		log.Info("steering engaged", "lease", s.cfg.Lease, "why", st.Why)
	case StateStandby:
		log.Info("steering standby: new connections reach the apiserver directly", "why", st.Why)
	case StateOff:
		log.Warn("steering off by the kill switch: new connections reach the apiserver directly")
	case StateLapsed:
		log.Warn("steering lapsed: new connections reach the apiserver directly", "err", st.Err)
	}
}

// counter is a monotonically increasing count read by collectors.
type counter struct{ n atomic.Uint64 }

func (c *counter) inc()          { c.n.Add(1) }
func (c *counter) load() float64 { return float64(c.n.Load()) }

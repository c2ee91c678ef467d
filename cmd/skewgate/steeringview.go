package main

import (
	"github.com/skewgate/skewgate/agent"
	"github.com/skewgate/skewgate/proxy/admin"
)

// steeringView is the agent's status as the admin listener shows it: the
// two halves meet here, neither importing the other. fromSwitch: the
// cluster's switch sets the mode (steeringMode).
func steeringView(st agent.NodeStatus, fromSwitch bool) *admin.SteeringView {
	v := &admin.SteeringView{Layout: admin.SteeringLayout, State: st.Steering, Connstat: st.Connstat, Mode: st.Mode,
		OffWaits: st.OffWaits, LocalAway: st.LocalAway, Apiserver: st.Apiserver, DirectError: st.DirectErr, Sweep: st.Sweep}
	if st.Mode != "" {
		v.ModeFrom = admin.ModeFromFlag
		if fromSwitch {
			v.ModeFrom = admin.ModeFromSwitch
		}
	}
	for _, t := range st.Targets {
		v.Targets = append(v.Targets, t.String())
	}
	for _, u := range st.Unsteered {
		v.Unsteered = append(v.Unsteered, u.String())
	}
	for _, d := range st.Direct {
		v.Direct = append(v.Direct, admin.DirectView{Address: d.Address.String(), Steered: d.Steered, Connections: d.Connections})
	}
	return v
}

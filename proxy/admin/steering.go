package admin

// SteeringLayout is the layout of SteeringView this skewgate writes: a
// reader that finds another says so rather than guess at renamed fields.
// A field added keeps the layout; one renamed, removed or changed in
// meaning bumps it.
const SteeringLayout = 1

// SteeringView is the kernel side of a node as /debug/routes and
// /debug/explain show it, typed: `kubectl skewgate status -o json` passes
// it on (docs/status.md). The agent fills it in
// cmd/skewgate, where the two halves meet.
type SteeringView struct {
	// Layout is SteeringLayout.
	Layout int `json:"layout"`
	// State is steering's state and why: "on (lease …)", "standby: …",
	// "lapsed: …", "off: …", "disabled: …".
	State string `json:"state"`
	// Connstat is the connstat program's state.
	Connstat string `json:"connstat,omitempty"`
	// Mode is the steering mode in force: auto, always or off (absent
	// where steering is not configured).
	Mode string `json:"mode,omitempty"`
	// ModeFrom says who chose Mode: ModeFromSwitch (the cluster's switch
	// kube-system/skewgate, written by its operators) or ModeFromFlag
	// (--steering-mode, the switch unset).
	ModeFrom string `json:"modeFrom,omitempty"`
	// OffWaits says why a wanted off waits: a rollback grace or its
	// settle holds a type.
	OffWaits string `json:"offWaits,omitempty"`
	// LocalAway says the local apiserver is away and its clients' new
	// connections go to peers.
	LocalAway string `json:"localAway,omitempty"`
	// Targets are the addresses steered, host:port.
	Targets []string `json:"targets,omitempty"`
	// Unsteered are addresses the apiserver serves that skewgate does not
	// steer: their clients bypass it.
	Unsteered []string `json:"unsteered,omitempty"`
	// Apiserver says where the local apiserver serves.
	Apiserver string `json:"apiserver,omitempty"`
	// Direct are the connections the apiserver holds itself, per address;
	// DirectError says why they could not be counted.
	Direct      []DirectView `json:"direct,omitempty"`
	DirectError string       `json:"directError,omitempty"`
	// Sweep says whether the sweep of quiet direct connections can run
	// when a window opens: "ok", "off: …" (--steering-reset-direct=false)
	// or "unsupported: …" (a kernel without SOCK_DESTROY).
	Sweep string `json:"sweep,omitempty"`
}

// Where a node's steering mode comes from (SteeringView.ModeFrom).
const (
	ModeFromSwitch = "switch"
	ModeFromFlag   = "flag"
)

// DirectView is one address's direct connections.
type DirectView struct {
	Address     string `json:"address"`
	Steered     bool   `json:"steered"`
	Connections int    `json:"connections"`
}

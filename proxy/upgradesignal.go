package proxy

import (
	"fmt"
	"os"
	"strings"

	"github.com/skewgate/skewgate/proxy/upgrade"
)

// newUpgradeSignal is the earliest upgrade signal, for the window: this
// node's manifest against its apiserver's version as membership last read
// it, and, once Start has cluster credentials, every node's lease and
// kubeadm's announcement.
func (p *Proxy) newUpgradeSignal(cfg Config) (*upgrade.Signal, error) {
	node := cfg.NodeName
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--node-name not set, and no host name: %w", err)
		}
		// The kubelet's default node name.
		node = strings.ToLower(h)
	}
	// A change re-evaluates the window at once, so its log line and
	// metric do not wait for the agent's next look.
	onChange := func() {
		if p.Members != nil {
			p.Members.Window()
		}
	}
	s, err := upgrade.New(upgrade.Config{Node: node, Manifest: cfg.APIServerManifest, Running: p.localVersion, OnChange: onChange,
		Announcements: cfg.KubeadmAnnouncement, Log: cfg.Log})
	if err != nil {
		return nil, fmt.Errorf("--node-name: %w", err)
	}
	return s, nil
}

// localVersion is the local apiserver's gitVersion as membership last read
// it: kept while the server is down, so a restart mid-upgrade does not end
// the signal. "" before p.Members exists or has read it.
func (p *Proxy) localVersion() string {
	if p.Members == nil {
		return ""
	}
	for _, st := range p.Members.Statuses() {
		if st.Local {
			return st.Version
		}
	}
	return ""
}

package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// State records everything a lab plane created, written before (namespaces,
// bridge) or right after (processes) each step, so tear-down after a crash or
// an interrupted `lab up` finds all of it.
type State struct {
	Spec   Spec     `json:"spec"`
	Bridge bool     `json:"bridge"`
	NetNS  []string `json:"netns"`
	Procs  []Proc   `json:"procs"`
	// Pins are bpffs directories of skewgates started with steering.
	Pins []string `json:"pins,omitempty"`
	// Kubelet is what the kubelet mode changed on the host.
	Kubelet *KubeletState `json:"kubelet,omitempty"`
	// Kubeadm are the kubeadm mode's bootstrap token and certificate key
	// (node-c joins later with them).
	Kubeadm *kubeadmSecrets `json:"kubeadm,omitempty"`
	// Kubelets are the kubeadm mode's kubelet version per node: the
	// kubelet is upgraded after its node's control plane, so it may
	// differ from Node.Version.
	Kubelets map[string]string `json:"kubelets,omitempty"`
	path     string
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// LoadState reads the state of the lab in dir; a missing file is an empty
// state, not an error.
func LoadState(dir string) (*State, error) {
	s := &State{path: statePath(dir)}
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read lab state: %w", err)
	}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("parse lab state %s: %w", s.path, err)
	}
	return s, nil
}

// save writes s atomically.
func (s *State) save() error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write lab state: %w", err)
	}
	return os.Rename(tmp, s.path)
}

// Empty reports whether the state holds nothing to tear down.
func (s *State) Empty() bool {
	return !s.Bridge && len(s.NetNS) == 0 && len(s.Procs) == 0 && len(s.Pins) == 0 && s.Kubelet == nil
}

// Proc returns the recorded process called name.
func (s *State) Proc(name string) (Proc, bool) {
	for _, p := range s.Procs {
		if p.Name == name {
			return p, true
		}
	}
	return Proc{}, false
}

func (s *State) setProc(p Proc) error {
	for i := range s.Procs {
		if s.Procs[i].Name == p.Name {
			s.Procs[i] = p
			return s.save()
		}
	}
	s.Procs = append(s.Procs, p)
	return s.save()
}

func (s *State) addPins(dir string) error {
	if !slices.Contains(s.Pins, dir) {
		s.Pins = append(s.Pins, dir)
	}
	return s.save()
}

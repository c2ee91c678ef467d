package upgrade

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"k8s.io/apimachinery/pkg/util/version"
)

// Condition is one node's upgrade (or rollback) as its static-pod manifest
// and its running apiserver show it: on from the moment kubeadm writes a
// manifest naming another version until the kubelet's restart of the
// apiserver reports that version.
type Condition struct {
	On bool
	// Node is the node's name; Manifest the version its manifest names;
	// Running the version its apiserver reports.
	Node, Manifest, Running string
}

// Reason says what the condition is, for logs and the window's reason.
func (c Condition) Reason() string {
	return fmt.Sprintf("node %s: manifest names kube-apiserver %s, running %s", c.Node, c.Manifest, c.Running)
}

// Decide compares the version a manifest's image tag names with the
// running apiserver's gitVersion: on when they differ as versions (build
// metadata aside, as semantic versioning compares). An error means the
// decision cannot be made: a tag that is no version (ErrNoVersion) or a
// running version that does not parse.
func Decide(tag, running string) (bool, error) {
	m, err := TagVersion(tag)
	if err != nil {
		return false, err
	}
	r, err := version.ParseSemantic(running)
	if err != nil {
		return false, fmt.Errorf("running version %q: %w", running, err)
	}
	return !m.EqualTo(r), nil
}

// manifestWatch decides this node's Condition from the manifest file and
// the running version, once per check. What it cannot decide keeps the
// last decision only where that is the safe reading: an unreadable or
// half-written file, or an apiserver whose version is not known (down for
// its restart), is no evidence that an upgrade ended.
type manifestWatch struct {
	node    string
	path    string
	running func() string
	log     *slog.Logger

	data   []byte // the manifest as last read
	tag    string // its kube-apiserver image tag
	last   Condition
	logged string // the last problem logged, so each is logged once
}

// check reads the manifest and decides; decided is false when it could
// not and the last decision (off before the first) stands.
func (w *manifestWatch) check() (c Condition, decided bool) {
	off := Condition{Node: w.node}
	data, err := os.ReadFile(w.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		w.note("no kube-apiserver static-pod manifest: not a kubeadm node, or not yet; this node's upgrade is seen once its apiserver reports another version", err)
		w.data, w.last = nil, off
		return off, true
	case err != nil:
		w.note("kube-apiserver manifest not readable; the last decision stands", err)
		return w.last, false
	}
	if !bytes.Equal(data, w.data) {
		image, err := ManifestImage(data)
		if err != nil {
			w.note("kube-apiserver manifest not understood; the last decision stands", err)
			return w.last, false
		}
		w.data, w.tag = data, ImageTag(image)
	}
	running := w.running()
	if running == "" {
		return w.last, false
	}
	on, err := Decide(w.tag, running)
	if errors.Is(err, ErrNoVersion) {
		w.note("kube-apiserver manifest's image names no version; its changes signal nothing", err)
		w.last = off
		return off, true
	}
	if err != nil {
		w.note("running kube-apiserver version not understood; the last decision stands", err)
		return w.last, false
	}
	w.logged = ""
	w.last = Condition{On: on, Node: w.node, Manifest: w.tag, Running: running}
	return w.last, true
}

// note logs a problem the first time it is seen, not on every poll.
func (w *manifestWatch) note(msg string, err error) {
	key := msg + err.Error()
	if key == w.logged {
		return
	}
	w.logged = key
	w.log.Info(msg, "manifest", w.path, "err", err)
}

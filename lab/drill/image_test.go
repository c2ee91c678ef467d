package drill

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"

	"github.com/skewgate/skewgate/deploy/image"
)

// A kubeadm drill whose skewgate modes would deploy a tag the archive does
// not carry is refused before any plane is built; a drill without a
// skewgate mode needs no image.
func TestCheckImage(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "img.tar")
	if err := image.WriteArchive(empty.Image, "ghcr.io/skewgate/skewgate:v0.1.0-aaaa", time.Unix(0, 0), archive); err != nil {
		t.Fatal(err)
	}
	auto := []string{ModeNone, ModeSkewgateAuto}
	for _, tc := range []struct {
		name string
		o    Options
		err  string
	}{
		{"the archive's tag", Options{Kubeadm: true, Modes: auto, Image: archive, ImageTag: "v0.1.0-aaaa"}, ""},
		{"another tag", Options{Kubeadm: true, Modes: auto, Image: archive, ImageTag: "v0.1.0-bbbb"}, "carries tag v0.1.0-aaaa, not v0.1.0-bbbb"},
		{"no archive", Options{Kubeadm: true, Modes: auto, ImageTag: "v0.1.0-aaaa"}, "need an image archive"},
		{"an archive that is not there", Options{Kubeadm: true, Modes: auto, Image: archive + ".gone", ImageTag: "v0.1.0-aaaa"}, "no such file"},
		{"no skewgate mode", Options{Kubeadm: true, Modes: []string{ModeNone, ModeInTree}}, ""},
		{"the binary-swap drill", Options{Modes: auto}, ""},
	} {
		err := checkImage(tc.o)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.err)
		}
	}
}

package drill

import (
	"testing"

	"github.com/skewgate/skewgate/lab"
)

func TestByNodeName(t *testing.T) {
	s, err := lab.ParseNodes("node-a=v1.35.4,node-b=v1.35.4")
	if err != nil {
		t.Fatal(err)
	}
	spec := s.Nodes
	conns := map[string]int{spec[0].IP.String() + ":6443": 3, spec[1].IP.String() + ":6443": 2, "10.0.0.9:6443": 1}
	if got, want := connsText(byNodeName(conns, spec)), "10.0.0.9:6443 1, node-a 3, node-b 2"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

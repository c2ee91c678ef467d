package agent

import (
	"testing"

	"github.com/vishvananda/netlink"
)

// TestIdle: what counts as nothing in flight on a direct connection, from
// the apiserver's side (ms since its last data received and sent).
func TestIdle(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		recv, sent, unacked, rq uint32
		want                    bool
	}{
		{"quiet for 2 s, its last answer and request in one jiffy", 2000, 2000, 0, 0, true},
		{"a watch: its last event sent 3 s ago, its request 60 s ago", 60000, 3000, 0, 0, true},
		{"answered 50 ms ago, after the request (a client between two requests)", 60, 50, 0, 0, true},
		{"answered 40 ms ago, within the jiffy its request came in", 40, 40, 0, 0, true},
		{"answered 5 ms ago: the client may be asking again", 15, 5, 0, 0, false},
		{"request received after the last answer (being computed)", 50, 300, 0, 0, false},
		{"request received, nothing answered for 2 s but data received 500 ms ago", 500, 2000, 0, 0, false},
		{"a request hung 6 s (etcd restarting), the last answer 8 s old", 6000, 8000, 0, 0, false},
		{"answer not yet acknowledged", 60, 50, 1, 0, false},
		{"request bytes unread", 60, 50, 0, 120, false},
	} {
		r := &netlink.InetDiagTCPInfoResp{
			InetDiagMsg: &netlink.Socket{RQueue: tc.rq},
			TCPInfo:     &netlink.TCPInfo{Last_data_recv: tc.recv, Last_data_sent: tc.sent, Unacked: tc.unacked},
		}
		if got := idle(r, resetSettle); got != tc.want {
			t.Errorf("%s: idle = %t, want %t", tc.name, got, tc.want)
		}
	}
	if idle(&netlink.InetDiagTCPInfoResp{InetDiagMsg: &netlink.Socket{}}, resetSettle) {
		t.Error("no tcp_info: idle")
	}
}

// TestResetsFor: the sweep moves clients for an upgrade or an arming, not
// when steering engaged for rule 3a alone (the kubeadm drill: 34 idle
// connections ended on node-a when kubeadm restarted its etcd).
func TestResetsFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode Mode
		w    Window
		want bool
	}{
		{"mode always (armed)", ModeAlways, Window{}, true},
		{"a skew window", ModeAuto, Window{Open: true, Reason: "versions differ"}, true},
		{"the local apiserver away, no window", ModeAuto, Window{LocalAway: "the local apiserver 127.0.0.1:6443 is away"}, false},
		{"mode off", ModeOff, Window{Open: true}, false},
	} {
		if got := resetsFor(tc.mode, tc.w); got != tc.want {
			t.Errorf("%s: resetsFor = %t, want %t", tc.name, got, tc.want)
		}
	}
}

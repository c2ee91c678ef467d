package proxy

import (
	"net/http"
	"testing"

	"github.com/skewgate/skewgate/proxy/forward"
)

// A request skewgate sends once, to its own apiserver, goes with the
// caller's Audit-ID or none: the apiserver makes one (see
// forward.EnsureAuditID for why skewgate does not). Merged discovery asks
// the local server, then answers itself: one ID, made by skewgate, for both.
func TestAuditIDOnlyWhereARequestTouchesTwo(t *testing.T) {
	rig := newIdentityRig(t)
	rig.startMembers(t)
	for _, tc := range []struct{ name, sent, want string }{
		{"without one", "", ""},
		{"the caller's", "Audit-ID: callers-own\n", "callers-own"},
	} {
		_, got := rig.send(t, "GET /api/v1/namespaces/default/configmaps HTTP/1.1\nHost: 127.0.0.1\n"+tc.sent+"\n")
		if ids := got.header.Values(forward.HeaderAuditID); len(ids) > 1 || firstOf(ids) != tc.want {
			t.Errorf("%s: the apiserver got Audit-ID %q, want %q", tc.name, ids, tc.want)
		}
	}

	rig.mu.Lock()
	rig.got = nil
	rig.mu.Unlock()
	code, header, _ := rig.sendRaw(t, "GET /apis HTTP/1.1\nHost: 127.0.0.1\nAccept: application/json\n\n")
	rig.mu.Lock()
	defer rig.mu.Unlock()
	if code != http.StatusOK || header.Get(forward.HeaderRoute) != "merged" {
		t.Fatalf("GET /apis: %d route %q, want 200 merged", code, header.Get(forward.HeaderRoute))
	}
	answered, checked := header.Get(forward.HeaderAuditID), ""
	if len(rig.got) > 0 {
		checked = rig.got[len(rig.got)-1].header.Get(forward.HeaderAuditID)
	}
	if answered == "" || checked != answered {
		t.Errorf("merged discovery answered with Audit-ID %q; the local server's check (%d requests) got %q; want one ID skewgate made for both",
			answered, len(rig.got), checked)
	}
}

func firstOf(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

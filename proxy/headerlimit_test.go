package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http2"
)

// Bug (issue 22): an anonymous HTTP/1.1 request with one header of about
// 1,048,500 bytes passed skewgate's listener (1 MiB plus Go's 4 KiB of
// slack), was refused by the HTTP/2 transport towards the apiserver (1 MiB
// + 320 of header list) and counted as the server failing to connect: the
// local server left routing. Requests the apiserver would not take are
// refused at the front, 431, and reach no server.
func TestOversizedHeadersRefusedAtTheFront(t *testing.T) {
	rig := newIdentityRig(t)
	many := strings.Repeat("A: b\n", 33000) // 198 KB over HTTP/1.1, 1.12 MB of HTTP/2 header list
	for name, raw := range map[string]string{
		"one large header": "GET /version HTTP/1.1\nHost: 127.0.0.1\nX-Big: " + strings.Repeat("a", 1048500) + "\n\n",
		"many small ones":  "GET /version HTTP/1.1\nHost: 127.0.0.1\n" + many + "\n",
		"merged discovery": "GET /apis HTTP/1.1\nHost: 127.0.0.1\nAccept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList\n" + many + "\n",
	} {
		rig.mu.Lock()
		rig.got = nil
		rig.mu.Unlock()
		if code, _, body := rig.sendRaw(t, raw); code != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%s: %d %.200s, want 431", name, code, body)
		}
		rig.mu.Lock()
		if len(rig.got) != 0 {
			t.Errorf("%s: the apiserver got the request", name)
		}
		rig.mu.Unlock()
	}
	var fields []string
	for i := range 1000 {
		fields = append(fields, "x-f"+strconv.Itoa(i), strings.Repeat("v", 1100))
	}
	// Go's HTTP/2 server answers 431, or ends a connection that goes on
	// sending CONTINUATION frames past its limit (PROTOCOL_ERROR).
	rig.mu.Lock()
	rig.got = nil
	rig.mu.Unlock()
	if status, reset := rig.sendH2(t, "/version", fields...); status != "431" && reset != http2.ErrCodeProtocol {
		t.Errorf("HTTP/2, 1.1 MB of header list: status %q reset %v, want 431 or PROTOCOL_ERROR", status, reset)
	}
	rig.mu.Lock()
	if len(rig.got) != 0 {
		t.Errorf("HTTP/2: the apiserver got the oversized request")
	}
	rig.mu.Unlock()
	for _, st := range rig.members.Statuses() {
		if st.LastError != "" || st.Healthy {
			t.Errorf("server %s judged by a caller's headers: healthy %t, %q", st.ID, st.Healthy, st.LastError)
		}
	}
	// Just under the front's limit, a request goes through.
	raw := "GET /version HTTP/1.1\nHost: 127.0.0.1\nX-Big: " + strings.Repeat("a", FrontHeaderBytes-4096) + "\n\n"
	if code, _ := rig.send(t, raw); code != http.StatusOK {
		t.Errorf("a header of %d bytes: %d, want 200", FrontHeaderBytes-4096, code)
	}
}

// A caller in 1,000 groups — one Impersonate-Group line each, as kubectl
// --as-group sends them — passes skewgate as it passes kube-apiserver,
// which takes 16384 header values. Built with Go 1.27, whose servers
// refuse more than 500 by default (431), skewgate would refuse it at the
// front without headercount.Set.
func TestCallerInThousandGroups(t *testing.T) {
	rig := newIdentityRig(t)
	var lines strings.Builder
	fields := []string{"impersonate-user", "bob"}
	for i := range 1000 {
		fmt.Fprintf(&lines, "Impersonate-Group: group-%d\n", i)
		fields = append(fields, "impersonate-group", "group-"+strconv.Itoa(i))
	}
	code, got := rig.send(t, "GET /version HTTP/1.1\nHost: 127.0.0.1\nImpersonate-User: bob\n"+lines.String()+"\n")
	if n := len(got.header.Values("Impersonate-Group")); code != http.StatusOK || n != 1000 {
		t.Errorf("HTTP/1.1: %d, the apiserver got %d groups; want 200 and 1000", code, n)
	}
	rig.mu.Lock()
	rig.got = nil
	rig.mu.Unlock()
	status, reset := rig.sendH2(t, "/version", fields...)
	rig.mu.Lock()
	defer rig.mu.Unlock()
	if status != "200" || len(rig.got) != 1 {
		t.Fatalf("HTTP/2: status %q reset %v, the apiserver got %d requests; want 200 and 1", status, reset, len(rig.got))
	}
	if n := len(rig.got[0].header.Values("Impersonate-Group")); n != 1000 {
		t.Errorf("HTTP/2: the apiserver got %d groups, want 1000", n)
	}
}

package membership

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/skewgate/skewgate/proxy/forward"
)

// skewgate's own requests (probes, discovery) name it and its version.
func TestOwnRequestsCarryUserAgent(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("User-Agent") + " as " + r.Header.Get("X-Remote-User")
	}))
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	ca, err := dynamiccertificates.NewStaticCAContent("test", caPEM)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.URL)
	m, err := New(Config{Local: u, UserAgent: "skewgate/v9.9.9 (linux/amd64) abc", Trust: forward.Trust{PeerCA: ca}})
	if err != nil {
		t.Fatal(err)
	}
	s := m.servers[ID(u)]
	if err := m.probe(t.Context(), s.client, srv.URL+"/readyz"); err != nil {
		t.Fatal(err)
	}
	if ua := <-got; ua != "skewgate/v9.9.9 (linux/amd64) abc as "+Identity {
		t.Errorf("probe sent %q", ua)
	}
}

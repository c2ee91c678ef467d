package forward

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// TestPeerCAReloads: a backend whose --peer-ca-file does not yet hold the
// server's CA refuses it; once the file is rewritten with the right CA, new
// connections verify without a restart.
func TestPeerCAReloads(t *testing.T) {
	up := newUpstream(t)
	caFile := filepath.Join(t.TempDir(), "peer-ca.crt")
	wrong, _ := keyPair(t, "some-other-ca", 0)
	if err := os.WriteFile(caFile, wrong, 0o644); err != nil {
		t.Fatal(err)
	}
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("peer-ca", caFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ca.Run(ctx, 1)
	trust := trustFor(t, up.Server)
	trust.PeerCA = ca
	b := backendFor(t, "up", up.Server, trust)

	get := func() int {
		w := httptest.NewRecorder()
		Forward(w, httptest.NewRequest(http.MethodGet, "/api", nil), Request{Candidates: []*Backend{b}, Idempotent: true})
		b.CloseIdle() // the next try needs a new handshake
		return w.Code
	}
	if code := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("with the wrong CA: %d, want 503", code)
	}
	right := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw})
	if err := os.WriteFile(caFile+".new", right, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(caFile+".new", caFile); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for get() != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the rewritten CA file was not picked up within 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

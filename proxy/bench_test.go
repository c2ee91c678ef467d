package proxy

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"
)

// BenchmarkHop is one GET over HTTP/2 with a client certificate, in
// process: direct to the upstream stand-in, and through skewgate's real
// TLS server and handler to it (routed locally). Every allocation of the
// process counts, client and upstream included: the difference between the
// two is the hop's own allocations per request, and shows a regression in a
// PR without the lab. `make bench` measures the hop against real
// apiservers.
func BenchmarkHop(b *testing.B) {
	rig := newIdentityRig(b)
	for _, bc := range []struct{ name, addr string }{{"direct", rig.upstream}, {"skewgate", rig.addr}} {
		client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{
			Certificates: []tls.Certificate{rig.client}, RootCAs: rig.roots, InsecureSkipVerify: bc.name == "direct"}}}
		url := "https://" + bc.addr + "/api/v1/namespaces/default/configmaps"
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
					b.Fatalf("%s: %s %s", bc.name, resp.Proto, resp.Status)
				}
			}
		})
		client.CloseIdleConnections()
	}
}

package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"sync"
	"syscall"
	"testing"
	"time"
)

// newSteadyRig is the identity rig with its membership running and the
// local stand-in confirmed healthy, so the benchmarks measure the steady
// path (rule local) and not the one for a local server not yet confirmed
// (rule local-away, which builds a reason per request); it fails the
// benchmark if the local server was not healthy to the end.
func newSteadyRig(b *testing.B, policy ...TLS) *identityRig {
	rig := newIdentityRig(b, policy...)
	rig.startMembers(b)
	b.Cleanup(func() {
		if !rig.members.Table().Local.Healthy {
			b.Errorf("the local stand-in was not healthy at the end: %+v", rig.members.Statuses())
		}
	})
	return rig
}

// BenchmarkHop is one GET over HTTP/2 with a client certificate, in
// process: direct to the upstream stand-in, and through skewgate's real
// TLS server and handler to it (routed locally, the local server confirmed
// healthy: rule local, as in production). Every allocation of the
// process counts, client and upstream included: the difference between the
// two is the hop's own allocations per request, and shows a regression in a
// PR without the lab. `make bench` measures the hop against real
// apiservers.
func BenchmarkHop(b *testing.B) {
	rig := newSteadyRig(b)
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

// BenchmarkHopBesideWatches is BenchmarkHop on a connection that also
// carries many open watches, as a client-go process multiplexes its
// informers' watches and its reads on one HTTP/2 connection (a
// controller-manager holds hundreds): direct to the upstream stand-in and
// through skewgate, each allowing 1000 streams per connection as
// kube-apiserver does.
func BenchmarkHopBesideWatches(b *testing.B) {
	const watches = 900
	rig := newSteadyRig(b, TLS{MaxStreams: 1000})
	for _, bc := range []struct{ name, addr string }{{"direct", rig.upstream}, {"skewgate", rig.addr}} {
		client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{
			Certificates: []tls.Certificate{rig.client}, RootCAs: rig.roots, InsecureSkipVerify: bc.name == "direct"}}}
		url := "https://" + bc.addr + "/api/v1/namespaces/default/configmaps"
		stop := openWatches(b, client, url, watches)
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
		stop()
		client.CloseIdleConnections()
	}
}

// openWatches opens n watches with client and returns once each has its
// first event; stop ends them. They share one connection with the
// client's later requests: the first request learns the server's stream
// limit before the watches go out (until then Go's transport assumes 100
// and dials more connections).
func openWatches(b *testing.B, client *http.Client, url string, n int) (stop func()) {
	resp, err := client.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	opened := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"?watch=true", nil)
			resp, err := client.Do(req)
			if err != nil {
				opened <- err
				return
			}
			defer resp.Body.Close()
			_, err = bufio.NewReader(resp.Body).ReadString('\n')
			opened <- err
			io.Copy(io.Discard, resp.Body)
		}()
	}
	stop = func() { cancel(); wg.Wait() }
	for range n {
		if err := <-opened; err != nil {
			stop()
			b.Fatal(err)
		}
	}
	return stop
}

// BenchmarkWatchHop is one watch carrying many small events over HTTP/2
// with a client certificate, direct to the upstream stand-in and through
// skewgate (routed locally); an op is one event. The stand-in writes
// events as kube-apiserver's watch handler does: one JSON object per line,
// flushed once no further event is queued. burst: the events are queued
// faster than they can be sent (an informer's burst of updates), so a
// flush may carry many. paced: each event is produced only once the
// client read the one before, so every event travels alone, flushed on
// its own, and its time is an event's delivery latency.
func BenchmarkWatchHop(b *testing.B) {
	rig := newSteadyRig(b)
	for _, pace := range []string{"burst", "paced"} {
		for _, bc := range []struct{ name, addr string }{{"direct", rig.upstream}, {"skewgate", rig.addr}} {
			client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{
				Certificates: []tls.Certificate{rig.client}, RootCAs: rig.roots, InsecureSkipVerify: bc.name == "direct"}}}
			b.Run(pace+"/"+bc.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(benchEvent)))
				url := fmt.Sprintf("https://%s/api/v1/namespaces/default/configmaps?watch=true&%s=%d", bc.addr, benchEventsParam, b.N)
				if pace == "paced" {
					url += "&" + benchPacedParam + "=true"
				}
				resp, err := client.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
					b.Fatalf("%s: %s %s", bc.name, resp.Proto, resp.Status)
				}
				events := bufio.NewScanner(resp.Body)
				n := 0
				for events.Scan() {
					if n++; pace == "paced" && n < b.N {
						rig.acks <- struct{}{}
					}
				}
				if n != b.N || events.Err() != nil {
					b.Fatalf("%s: %d of %d events: %v", bc.name, n, b.N, events.Err())
				}
			})
			client.CloseIdleConnections()
		}
	}
}

// The stand-in's query parameters for a watch of benchmark events: how
// many, and whether each waits for the client to have read the one before.
const (
	benchEventsParam = "benchEvents"
	benchPacedParam  = "benchPaced"
)

// benchEvent is one event of a ConfigMap watch as kube-apiserver writes it.
var benchEvent = []byte(`{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"bench-00042",` +
	`"namespace":"default","uid":"7b1c2f64-0d1e-4a8b-9c3d-5e6f7a8b9c0d","resourceVersion":"123456","creationTimestamp":"2026-12-01T10:00:00Z",` +
	`"managedFields":[{"manager":"bench","operation":"Update","apiVersion":"v1","time":"2026-12-01T10:00:00Z","fieldsType":"FieldsV1",` +
	`"fieldsV1":{"f:data":{".":{},"f:value":{}}}}]},"data":{"value":"0123456789abcdef0123456789abcdef"}}}` + "\n")

// streamEvents answers a watch with n benchmark events, queued by a
// producer and written as kube-apiserver's watch handler writes them: each
// event, then a flush if no further event is queued. Paced (the
// benchPacedParam), each event after the first is produced once acks
// says the client read the one before.
func streamEvents(w http.ResponseWriter, r *http.Request, n int, acks <-chan struct{}) {
	paced := r.URL.Query().Get(benchPacedParam) == "true"
	ch := make(chan []byte, 100)
	go func() {
		defer close(ch)
		for i := range n {
			if paced && i > 0 {
				select {
				case <-acks:
				case <-r.Context().Done():
					return
				}
			}
			ch <- benchEvent
		}
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	for ev := range ch {
		w.Write(ev)
		if len(ch) == 0 {
			flusher.Flush()
		}
	}
}

// BenchmarkHopParallel is BenchmarkHop at saturation: 32 clients at once
// (16 per core of this machine, as `make bench` runs 32), each with its own
// HTTP/2 connection, as many GETs as they can. It reports the process's
// CPU per request (cpu-µs/op: client, upstream and proxy together): the
// difference between a path and direct is that path's hop, in CPU. bare is
// the floor of any Go L7 hop: the standard library's reverse proxy over
// the same TLS and HTTP/2, doing nothing but forward. skewgate's distance
// above bare is its own work (authentication, identity, routing, metrics,
// failover).
func BenchmarkHopParallel(b *testing.B) {
	rig := newSteadyRig(b)
	bare := newBareProxy(b, rig)
	for _, bc := range []struct{ name, addr string }{{"direct", rig.upstream}, {"bare", bare}, {"skewgate", rig.addr}} {
		url := "https://" + bc.addr + "/api/v1/namespaces/default/configmaps"
		var clients []*http.Client
		var mu sync.Mutex
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16)
			before := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{
					Certificates: []tls.Certificate{rig.client}, RootCAs: rig.roots, InsecureSkipVerify: bc.name != "skewgate"}}}
				mu.Lock()
				clients = append(clients, client)
				mu.Unlock()
				for pb.Next() {
					resp, err := client.Get(url)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
						b.Errorf("%s: %s %s", bc.name, resp.Proto, resp.Status)
						return
					}
				}
			})
			b.ReportMetric(float64((processCPU(b)-before).Microseconds())/float64(b.N), "cpu-µs/op")
		})
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}
}

// processCPU is the CPU time this process spent so far, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// newBareProxy serves the standard library's reverse proxy to the rig's
// upstream over TLS and HTTP/2, verifying client certificates as skewgate
// does, and returns its address.
func newBareProxy(b *testing.B, rig *identityRig) string {
	target, err := neturl.Parse("https://" + rig.upstream)
	if err != nil {
		b.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:  &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
		BufferPool: bareBuffers{},
	}
	s := httptest.NewUnstartedServer(rp)
	s.EnableHTTP2 = true
	s.TLS = &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: rig.roots}
	s.StartTLS()
	b.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

// bareBuffers pools the bare proxy's copy buffers, as skewgate does, so
// that bare is the machinery alone.
type bareBuffers struct{}

var bareBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bareBuffers) Get() []byte  { return *bareBufferPool.Get().(*[]byte) }
func (bareBuffers) Put(b []byte) { bareBufferPool.Put(&b) }

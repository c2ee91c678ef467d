package forward

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// heldServer is an HTTP/2 apiserver stand-in whose handler signals each
// request's arrival, reads its body if read is set, and answers 201 once
// release is closed. Its frames are kube-apiserver's size (256 KiB), which
// sizes the transport's own buffer for each request body it sends.
func heldServer(t *testing.T, read bool) (up *httptest.Server, arrived chan struct{}, release chan struct{}) {
	arrived, release = make(chan struct{}, 100), make(chan struct{})
	up = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		if read {
			io.Copy(io.Discard, r.Body)
		}
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	up.EnableHTTP2 = true
	up.Config.HTTP2 = &http.HTTP2Config{MaxReadFrameSize: 256 << 10}
	up.StartTLS()
	t.Cleanup(up.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return up, arrived, release
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Bug (issue 23): the copy of a caller's body kept to send it again was
// allocated from its declared Content-Length before a byte arrived: 40
// requests that declared 3 MiB and sent only their headers grew the heap
// by 121-137 MiB, and ~80 slow requests from any ServiceAccount could get
// skewgate OOM-killed. The copy grows as bytes arrive.
func TestDeclaredLengthCostsNothingUntilBytesArrive(t *testing.T) {
	up, arrived, release := heldServer(t, false)
	b := backendFor(t, "local", up, trustFor(t, up))
	before := heapInUse()
	var wg sync.WaitGroup
	var writers []*io.PipeWriter
	for range 40 {
		pr, pw := io.Pipe() // written only at the end: a caller that sent its headers
		writers = append(writers, pw)
		r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/n/configmaps", pr)
		r.ContentLength = MaxReplay
		wg.Add(1)
		go func() {
			defer wg.Done()
			Forward(httptest.NewRecorder(), r, Request{Candidates: []*Backend{b}})
		}()
	}
	for range 40 {
		<-arrived
	}
	grown := int64(heapInUse()) - int64(before)
	t.Logf("40 requests declaring %d bytes, none sent: heap grew by %.1f MiB", MaxReplay, float64(grown)/(1<<20))
	// Go's HTTP/2 transport itself holds a frame-sized buffer (256 KiB)
	// for each body it is sending: 10 MiB of the growth.
	if grown > 16<<20 {
		t.Errorf("heap grew by %d MiB for bodies not yet sent, want < 16 MiB", grown>>20)
	}
	close(release)
	for _, pw := range writers {
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}
	wg.Wait()
}

// Bodies kept to be sent again stay within the global replay budget; past
// it a body is streamed without a copy, and every request is still served.
// The budget is all given back when the requests end.
func TestReplayBudgetBoundsKeptBodies(t *testing.T) {
	SetReplayBudget(1 << 20)
	t.Cleanup(func() { SetReplayBudget(0) })
	up, arrived, release := heldServer(t, true)
	b := backendFor(t, "local", up, trustFor(t, up))
	const n, part = 4, 600 << 10
	var wg sync.WaitGroup
	codes := make(chan int, n)
	var writers []*io.PipeWriter
	for range n {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/n/configmaps", pr)
		r.ContentLength = -1
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			Forward(w, r, Request{Candidates: []*Backend{b}})
			codes <- w.Code
		}()
	}
	for range n {
		<-arrived
	}
	for _, pw := range writers {
		// Returns once the transport has read it all, so kept or not.
		if _, err := io.WriteString(pw, strings.Repeat("x", part)); err != nil {
			t.Fatal(err)
		}
	}
	if kept := ReplayBytes(); kept > 1<<20 || kept == 0 {
		t.Errorf("%d bodies of %d bytes in flight keep %d bytes, want some, within the budget of %d", n, part, kept, 1<<20)
	}
	for _, pw := range writers {
		pw.Close()
	}
	close(release)
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusCreated {
			t.Errorf("a request past the budget: %d, want 201", code)
		}
	}
	if kept := ReplayBytes(); kept != 0 {
		t.Errorf("%d bytes still counted kept after every request ended", kept)
	}
}

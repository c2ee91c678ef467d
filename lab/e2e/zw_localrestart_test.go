package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// TestXLocalRestart restarts node-a's own kube-apiserver under a client
// pinned to node-a's skewgate, as kube-controller-manager and kubelets on
// a control-plane node are pinned to its local endpoint: 50 requests a
// second (lists, creates, deletes of configmaps) and a watch. While node-a
// is away its requests go to node-b, which serves configmaps too (rule
// 3a). A graceful restart must cost nothing; a crash only the writes in
// flight at the kill.
//
// A client that ignores Retry-After counts the apiserver's own "503
// apiserver is shutting down" as the failure it is: skewgate moves such a
// request to node-b.
func TestXLocalRestart(t *testing.T) {
	t.Run("graceful", func(t *testing.T) {
		localRestart(t, func() error { return plane.StopNode("node-a") }, true)
	})
	t.Run("crash", func(t *testing.T) {
		localRestart(t, func() error { return plane.KillNode("node-a") }, false)
	})
}

// restartLoad counts a pinned client's outcomes.
type restartLoad struct {
	mu       sync.Mutex
	reads    map[string]int // "200 local", "503 unavailable", "error" …
	writes   map[string]int
	failedR  int
	failedW  int
	skipped  int // deletes not sent: their create failed
	firstErr []string
}

func (l *restartLoad) note(write bool, code int, route string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := fmt.Sprintf("%d %s", code, route)
	if err != nil {
		key = "error"
	}
	failed := err != nil || code >= 500 || code == http.StatusNotFound
	if write {
		l.writes[key]++
		if failed {
			l.failedW++
		}
	} else {
		l.reads[key]++
		if failed {
			l.failedR++
		}
	}
	if failed && len(l.firstErr) < 5 {
		l.firstErr = append(l.firstErr, fmt.Sprintf("write=%t %s %v", write, key, err))
	}
}

func localRestart(t *testing.T, stop func() error, graceful bool) {
	c, sg := client(t, plane.PKI.Admin), via(t)
	const cms = "/api/v1/namespaces/default/configmaps"
	waitFor(t, 30*time.Second, "configmaps routed to node-a", func() bool {
		r := do(t, c, http.MethodGet, sg+cms, nil)
		return r.Code == http.StatusOK && r.Header.Get("X-Skewgate-Route") == "local"
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	run := time.Now().UnixMilli() % 1e6 // names of an earlier run's leftovers do not collide
	load := pinnedLoad(ctx, c, sg+cms, fmt.Sprintf("via-%d", run), &wg)
	direct := pinnedLoad(ctx, c, node(t, "node-a").URL()+cms, fmt.Sprintf("direct-%d", run), &wg)
	gaps := watchGaps(ctx, t, sg, &wg)
	livez := livezSeen(ctx, c, sg, &wg)

	time.Sleep(2 * time.Second)
	stopped := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := plane.StartNode(context.Background(), "node-a", 90*time.Second); err != nil {
		t.Fatalf("start node-a again: %v", err)
	}
	away := time.Since(stopped)
	waitFor(t, 30*time.Second, "configmaps routed to node-a again", func() bool {
		r := do(t, c, http.MethodGet, sg+cms, nil)
		return r.Code == http.StatusOK && r.Header.Get("X-Skewgate-Route") == "local"
	})
	time.Sleep(time.Second)
	cancel()
	wg.Wait()

	direct.mu.Lock()
	t.Logf("direct to node-a's apiserver, the same load: %d of %d reads and %d of %d writes failed (%d deletes not sent); reads %v; writes %v",
		direct.failedR, sum(direct.reads), direct.failedW, sum(direct.writes), direct.skipped, direct.reads, direct.writes)
	direct.mu.Unlock()
	load.mu.Lock()
	defer load.mu.Unlock()
	t.Logf("through skewgate: %d of %d reads and %d of %d writes failed (%d deletes not sent)", load.failedR, sum(load.reads), load.failedW, sum(load.writes), load.skipped)
	t.Logf("node-a away %s; reads %v; writes %v; watch re-established after %v; /livez through skewgate answered %v", away.Round(100*time.Millisecond), load.reads, load.writes, gaps.list(), livez.list())
	if load.failedR > 0 {
		t.Errorf("%d reads failed while node-a restarted (%v)", load.failedR, load.firstErr)
	}
	switch {
	case graceful && load.failedW > 0:
		t.Errorf("%d writes failed during a graceful restart (%v)", load.failedW, load.firstErr)
	case !graceful && load.failedW > 3:
		t.Errorf("%d writes failed at the crash, more than could have been in flight (%v)", load.failedW, load.firstErr)
	}
	// kubeadm waits for the local apiserver through the node's address:
	// its /livez must show the restart, never a peer's 200.
	if codes := livez.list(); !slices.ContainsFunc(codes, func(c int) bool { return c != http.StatusOK }) {
		t.Errorf("/livez through skewgate answered only %v while node-a restarted: a peer's health stood in", codes)
	}
	if gaps.max() > time.Second && graceful {
		t.Errorf("the watch came back only after %s", gaps.max())
	}
	if gaps.count() == 0 && graceful {
		t.Log("the watch was not cut: it ran through node-b or survived")
	}
}

// shuttingDown labels a request a kube-apiserver refused as it began to
// shut down: its own 503 "apiserver is shutting down" with Retry-After,
// answered before any handler ran (WithWaitGroup). client-go sends it
// again after a second, but this client, like any that ignores
// Retry-After, does not: it is a failure. Through skewgate it must not
// appear (the request moves to a peer); labelled apart in the tallies so
// the log shows how many the direct path saw.
const shuttingDown = "refused at shutdown"

// refusedAtShutdown reports whether resp is that 503; it reads the body.
func refusedAtShutdown(resp *http.Response) bool {
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		return false
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return bytes.Contains(body, []byte("apiserver is shutting down"))
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// pinnedLoad sends 50 requests a second to url (a configmaps collection)
// until ctx ends: a list, a create, a delete of what it created, in turn.
// A delete waits for its create's answer, and is not sent when the create
// failed (that failure is counted; the delete's 404 would count it twice).
func pinnedLoad(ctx context.Context, c *http.Client, url, prefix string, wg *sync.WaitGroup) *restartLoad {
	load := &restartLoad{reads: map[string]int{}, writes: map[string]int{}}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var created chan bool
		for i := 0; ctx.Err() == nil; i++ {
			<-tick.C
			if i%3 == 1 {
				created = make(chan bool, 1)
			}
			wg.Add(1)
			go func(i int, created chan bool) {
				defer wg.Done()
				name := fmt.Sprintf("restart-%s-%d", prefix, i/3)
				method, target, body, write := http.MethodGet, url, []byte(nil), false
				switch i % 3 {
				case 1:
					method, body, write = http.MethodPost, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+name+`"}}`), true
				case 2:
					if !<-created {
						load.mu.Lock()
						load.skipped++
						load.mu.Unlock()
						return
					}
					method, target, write = http.MethodDelete, url+"/"+name, true
				}
				code := 0
				if created != nil && i%3 == 1 {
					defer func() { created <- code == http.StatusCreated }()
				}
				rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer rcancel()
				req, _ := http.NewRequestWithContext(rctx, method, target, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				if err != nil {
					load.note(write, 0, "", err)
					return
				}
				route := resp.Header.Get("X-Skewgate-Route")
				if refusedAtShutdown(resp) {
					route = shuttingDown
				}
				resp.Body.Close()
				code = resp.StatusCode
				load.note(write, resp.StatusCode, route, nil)
			}(i, created)
		}
	}()
	return load
}

// codeList records the distinct answers of a poll, in order.
type codeList struct {
	mu    sync.Mutex
	codes []int
}

func (l *codeList) add(c int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.codes); n == 0 || l.codes[n-1] != c {
		l.codes = append(l.codes, c)
	}
}

func (l *codeList) list() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.codes)
}

// livezSeen polls /livez through skewgate every 100 ms, as kubeadm's wait
// for the local apiserver does, and records each change of answer (0: no
// answer).
func livezSeen(ctx context.Context, c *http.Client, sg string, wg *sync.WaitGroup) *codeList {
	l := &codeList{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			req, _ := http.NewRequestWithContext(rctx, http.MethodGet, sg+"/livez", nil)
			code := 0
			if resp, err := c.Do(req); err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			cancel()
			if ctx.Err() == nil {
				l.add(code)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return l
}

// gapList records how long a watch took to be re-established.
type gapList struct {
	mu   sync.Mutex
	gaps []time.Duration
}

func (g *gapList) add(d time.Duration) { g.mu.Lock(); g.gaps = append(g.gaps, d); g.mu.Unlock() }
func (g *gapList) list() []time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]time.Duration(nil), g.gaps...)
}
func (g *gapList) count() int { return len(g.list()) }
func (g *gapList) max() time.Duration {
	var m time.Duration
	for _, d := range g.list() {
		m = max(m, d)
	}
	return m
}

// watchGaps keeps a watch on configmaps through skewgate until ctx ends,
// re-watching from the last resource version whenever it ends, as an
// informer does.
func watchGaps(ctx context.Context, t *testing.T, sg string, wg *sync.WaitGroup) *gapList {
	dyn, err := dynamic.NewForConfig(restConfig(t, sg))
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	g := &gapList{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ended time.Time
		for ctx.Err() == nil {
			w, err := dyn.Resource(gvr).Namespace("default").Watch(ctx, metav1.ListOptions{})
			if err != nil {
				if ended.IsZero() {
					ended = time.Now()
				}
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if !ended.IsZero() {
				g.add(time.Since(ended))
			}
			for range w.ResultChan() {
			}
			ended = time.Now()
		}
	}()
	return g
}

package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/lab"
)

// Watches of one large ConfigMap through node-b's skewgate (issue 40
// item 3): half JSON, half protobuf, as client-go's two encodings.
const (
	largeWatches  = 200
	largeBytes    = 1000 << 10 // the ConfigMap's data: near the 1 MiB an object may have
	largeUpdates  = 4
	largeConns    = 2 // the watches' client connections: one per encoding
	idleRSS       = 62 << 20
	perWatchBytes = 50 << 10
	perConnBytes  = 55 << 10
)

// sizingLimit is docs/deploy.md's sizing formula: the container memory
// limit for w watches and c client connections,
// (62 MiB + 50 KiB × watches + 55 KiB × connections) × 2 / 0.75.
func sizingLimit(w, c int64) int64 {
	return (idleRSS + perWatchBytes*w + perConnBytes*c) * 2 * 4 / 3
}

// TestWatchesOfLargeObjects: a watch's memory in skewgate does not grow
// with the size of the objects it carries. 200 watches of a 1000 KiB
// ConfigMap through skewgate, run with the memory limit docs/deploy.md's
// formula gives for 200 watches: every update reaches every watch whole,
// skewgate's RSS stays under that limit and it never sheds. (Keeping a
// copy of each watch's largest event, 1.75 MiB per watch here, it could
// not: about 400 such watches made skewgate shed, 550 got it OOM-killed.)
func TestWatchesOfLargeObjects(t *testing.T) {
	b := node(t, "node-b")
	limit := sizingLimit(largeWatches, largeConns)
	proc := startLimited(t, b, limit)
	base := b.URL() + "/api/v1/namespaces/default/configmaps"

	direct := scaleClient(t, node(t, "node-a").URL(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cms := direct.CoreV1().ConfigMaps("default")
	cms.Delete(ctx, "large-watched", metav1.DeleteOptions{})
	cm, err := cms.Create(ctx, largeConfigMap(0), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	episodes := func() float64 {
		return metricValues(lab.SkewgateAdminURL(b)+"/metrics", "skewgate_shedding_episodes_total")["skewgate_shedding_episodes_total"]
	}
	shed0 := episodes()

	var wg sync.WaitGroup
	rss := sampleRSS(ctx, proc.PID, b, &wg)
	url := base + "?watch=true&fieldSelector=metadata.name%3Dlarge-watched&resourceVersion=" + cm.ResourceVersion
	watches := make([]*largeWatch, largeWatches)
	// One HTTP/2 connection per encoding (largeConns), as the admin.
	tlsConfig := client(t, plane.PKI.Admin).Transport.(*http.Transport).TLSClientConfig
	encodings := []string{"application/json", "application/vnd.kubernetes.protobuf;stream=watch"}
	clients := []*http.Client{{Transport: &http2.Transport{TLSClientConfig: tlsConfig.Clone()}}, {Transport: &http2.Transport{TLSClientConfig: tlsConfig.Clone()}}}
	for i := range watches {
		watches[i] = startLargeWatch(ctx, t, clients[i%2], url, encodings[i%2], &wg)
	}
	t.Logf("%d watches through skewgate; RSS %d MiB", largeWatches, rss.peak.Load()>>20)
	for u := 1; u <= largeUpdates; u++ {
		start := time.Now()
		cm.Data = largeConfigMap(u).Data
		if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for !allRead(watches, u) {
			if time.Now().After(deadline) {
				t.Fatalf("update %d: not every watch read it within 60 s (%s)", u, watchSummary(watches))
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("update %d read by every watch in %s; RSS peak so far %d MiB", u, time.Since(start).Round(time.Millisecond), rss.peak.Load()>>20)
	}
	hwm := procStatusKiB(t, proc.PID, "VmHWM") << 10
	cancel()
	wg.Wait()
	shed := episodes() - shed0
	var bytesRead int64
	for _, w := range watches {
		bytesRead += w.bytes.Load()
	}
	t.Logf("%d watches, %d updates of a %d KiB ConfigMap: %d events, %d MiB read; skewgate RSS peak %d MiB (VmHWM %d MiB), the sizing formula's limit %d MiB (set as its memory limit); shedding episodes %.0f; %s",
		largeWatches, largeUpdates, largeBytes>>10, largeWatches*largeUpdates, bytesRead>>20, rss.peak.Load()>>20, hwm>>20, limit>>20, shed, watchSummary(watches))
	if hwm >= limit {
		t.Errorf("skewgate's RSS reached %d MiB, over the %d MiB the sizing formula gives for %d watches", hwm>>20, limit>>20, largeWatches)
	}
	if shed > 0 {
		t.Errorf("skewgate shed %.0f times under %d watches, within the sizing formula's limit", shed, largeWatches)
	}
}

func largeConfigMap(update int) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "large-watched"},
		Data: map[string]string{"v": fmt.Sprintf("%03d", update) + strings.Repeat("x", largeBytes-3)}}
}

// largeWatch counts the whole events a watch read.
type largeWatch struct {
	events, bytes atomic.Int64
	err           atomic.Pointer[string]
}

// startLargeWatch opens a watch at url and counts its events until ctx
// ends; it returns once the watch is established.
func startLargeWatch(ctx context.Context, t *testing.T, c *http.Client, url, accept string, wg *sync.WaitGroup) *largeWatch {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", accept)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Skewgate-Route") == "" {
		t.Fatalf("watch: %d, route %q", resp.StatusCode, resp.Header.Get("X-Skewgate-Route"))
	}
	w := &largeWatch{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer resp.Body.Close()
		err := w.count(resp.Body, strings.HasPrefix(accept, "application/json"))
		if ctx.Err() == nil {
			msg := fmt.Sprintf("ended early: %v", err)
			w.err.Store(&msg)
		}
	}()
	return w
}

// count reads events through an 8 KiB buffer, counting the whole ones:
// JSON events end with a newline, protobuf ones are length-prefixed.
func (w *largeWatch) count(r io.Reader, json bool) error {
	buf := make([]byte, 8<<10)
	var prefix []byte
	left := 0
	for {
		n, err := r.Read(buf)
		w.bytes.Add(int64(n))
		b := buf[:n]
		if json {
			w.events.Add(int64(bytes.Count(b, []byte{'\n'})))
		}
		for !json && len(b) > 0 {
			if left > 0 {
				k := min(left, len(b))
				b, left = b[k:], left-k
				if left == 0 {
					w.events.Add(1)
				}
				continue
			}
			k := min(4-len(prefix), len(b))
			prefix, b = append(prefix, b[:k]...), b[k:]
			if len(prefix) == 4 {
				left, prefix = int(binary.BigEndian.Uint32(prefix)), prefix[:0]
			}
		}
		if err != nil {
			return err
		}
	}
}

func allRead(ws []*largeWatch, events int) bool {
	for _, w := range ws {
		if w.events.Load() < int64(events) || w.err.Load() != nil {
			return false
		}
	}
	return true
}

// watchSummary is how many watches read how many events, and the first
// one that ended.
func watchSummary(ws []*largeWatch) string {
	by := map[int64]int{}
	ended := ""
	for _, w := range ws {
		by[w.events.Load()]++
		if e := w.err.Load(); e != nil && ended == "" {
			ended = *e
		}
	}
	return fmt.Sprintf("watches by events read %v, first ended: %q", by, ended)
}

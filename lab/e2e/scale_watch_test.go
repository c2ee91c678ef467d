package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// scaleClient is one client of host as a kubelet or a controller is one:
// client-go with its own transport (a Dial of its own keeps client-go from
// sharing one cached transport among all clients of the same
// credentials), so its own TCP and TLS connections; no client-side rate
// limit, which would only slow the ramp. seen counts the retryable
// answers (429, 503) client-go saw and sent again.
func scaleClient(b testing.TB, host string, seen *atomic.Int64) *kubernetes.Clientset {
	b.Helper()
	cfg := &rest.Config{Host: host, QPS: -1,
		TLSClientConfig: rest.TLSClientConfig{CAFile: plane.PKI.CAFile, CertFile: plane.PKI.Admin.CertFile, KeyFile: plane.PKI.Admin.KeyFile},
		Dial:            (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext}
	if seen != nil {
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return retryCounter{rt, seen} }
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

// retryCounter counts answers client-go sends again after Retry-After.
type retryCounter struct {
	rt   http.RoundTripper
	seen *atomic.Int64
}

func (r retryCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.rt.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && resp.Header.Get("Retry-After") != "" {
		r.seen.Add(1)
	}
	return resp, err
}

// scaleWatch is one client-go reflector keeping one ConfigMap (field
// selector metadata.name, as a kubelet watches its own node's pods) in a
// store that checks every version arrives: the load numbers each update
// (data.n = 1, 2, 3 …), so a missed event shows as a gap. A watch that
// ends and is re-established from its resource version is not lost; one
// whose reflector lists again (an error, a 410 Gone, a very short watch)
// or that misses or never sees an update is.
type scaleWatch struct {
	obj        int
	synced     atomic.Bool
	watchCalls atomic.Int64

	mu       sync.Mutex
	last     int // the highest n seen; -1 none
	replaces int // 1 is the first list; more are relists
	gaps     int // updates skipped between two versions seen
}

func (w *scaleWatch) saw(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	n, err := strconv.Atoi(cm.Data["n"])
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last >= 0 && n > w.last+1 {
		w.gaps += n - w.last - 1
	}
	w.last = max(w.last, n)
}

// The reflector's store (cache.ReflectorStore).
func (w *scaleWatch) Add(obj any) error    { w.saw(obj); return nil }
func (w *scaleWatch) Update(obj any) error { w.saw(obj); return nil }
func (w *scaleWatch) Delete(any) error     { return nil }
func (w *scaleWatch) Resync() error        { return nil }
func (w *scaleWatch) Replace(list []any, _ string) error {
	w.mu.Lock()
	w.replaces++
	w.mu.Unlock()
	for _, o := range list {
		w.saw(o)
	}
	w.synced.Store(true)
	return nil
}

// state returns the highest version seen, the relists and the gaps.
func (w *scaleWatch) state() (last, relists, gaps int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, max(w.replaces-1, 0), w.gaps
}

// run keeps the reflector going until ctx ends.
func (w *scaleWatch) run(ctx context.Context, cs *kubernetes.Clientset, name string) {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	cms := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return cms.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			w.watchCalls.Add(1)
			return cms.Watch(ctx, o)
		},
	}
	r := cache.NewReflectorWithOptions(lw, &corev1.ConfigMap{}, w, cache.ReflectorOptions{Name: fmt.Sprintf("scale-%s", name)})
	r.RunWithContext(ctx)
}

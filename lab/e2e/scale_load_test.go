package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// scalePath is one side of the scale run: its clients reach node-a
// through skewgate, or directly. Each side has its own ConfigMaps, so the
// same load on each is counted apart.
type scalePath struct {
	name    string
	url     string
	prefix  string // ConfigMap names and the label scale=<prefix>
	objects int
	load    []*kubernetes.Clientset
	watches []*scaleWatch
	retried atomic.Int64 // 429s and 503s client-go sent again

	mu      sync.Mutex
	value   []int  // each object's data.n as last written
	unknown []bool // a write's outcome is unknown: read before the next
	busy    []bool
	tally   []scaleRequest
	touch   atomic.Int64
	tmp     atomic.Int64
}

// scaleRequest is one request of the load and its outcome.
type scaleRequest struct {
	kind       string
	start, end time.Time
	err        error
}

func newScalePath(b testing.TB, name, url, prefix string, objects, loadClients int) *scalePath {
	p := &scalePath{name: name, url: url, prefix: prefix, objects: objects,
		value: make([]int, objects), unknown: make([]bool, objects), busy: make([]bool, objects)}
	for range loadClients {
		p.load = append(p.load, scaleClient(b, url, &p.retried))
	}
	return p
}

func (p *scalePath) objName(i int) string { return fmt.Sprintf("%s-%05d", p.prefix, i) }

func (p *scalePath) object(i, n int) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: p.objName(i), Labels: map[string]string{"scale": p.prefix}},
		Data: map[string]string{"n": strconv.Itoa(n)}}
}

// createObjects writes the side's ConfigMaps at n=0 through oracle (node-b,
// never restarted), 16 at a time.
func (p *scalePath) createObjects(ctx context.Context, oracle *kubernetes.Clientset) error {
	sem := make(chan struct{}, 16)
	errs := make(chan error, p.objects)
	for i := range p.objects {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			cms := oracle.CoreV1().ConfigMaps(metav1.NamespaceDefault)
			_, err := cms.Create(ctx, p.object(i, 0), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				_, err = cms.Update(ctx, p.object(i, 0), metav1.UpdateOptions{})
			}
			errs <- err
		}()
	}
	for range p.objects {
		if err := <-errs; err != nil {
			return fmt.Errorf("create %s objects: %w", p.name, err)
		}
	}
	return nil
}

// run sends rate requests a second until ctx ends, each on its own
// goroutine, as many clients would: 5 in 10 a GET of one object, 2 a list
// (50 of the side's objects), 2 an update that numbers an object's next
// version (the events the watches must all see), 1 a create and then a
// delete of a scratch ConfigMap.
func (p *scalePath) run(ctx context.Context, rate int, oracle *kubernetes.Clientset, wg *sync.WaitGroup) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.request(n, oracle)
		}()
	}
}

func (p *scalePath) request(n int, oracle *kubernetes.Clientset) {
	cms := p.load[n%len(p.load)].CoreV1().ConfigMaps(metav1.NamespaceDefault)
	switch n % 10 {
	case 0, 1, 2, 3, 4:
		name := p.objName(rand.IntN(p.objects))
		p.timed("get", func(ctx context.Context) error { _, err := cms.Get(ctx, name, metav1.GetOptions{}); return err })
	case 5, 6:
		p.timed("list", func(ctx context.Context) error {
			_, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "scale=" + p.prefix, Limit: 50})
			return err
		})
	case 7, 8:
		p.update(cms, oracle)
	case 9:
		name := fmt.Sprintf("%s-tmp-%d", p.prefix, p.tmp.Add(1))
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}
		if p.timed("create", func(ctx context.Context) error { _, err := cms.Create(ctx, obj, metav1.CreateOptions{}); return err }) {
			p.timed("delete", func(ctx context.Context) error { return cms.Delete(ctx, name, metav1.DeleteOptions{}) })
		}
	}
}

// update writes the next version of the next object in turn, unless a
// write of it is still on its way. After a write whose outcome is unknown
// it reads the object from the oracle first, so versions stay consecutive.
func (p *scalePath) update(cms interface {
	Update(context.Context, *corev1.ConfigMap, metav1.UpdateOptions) (*corev1.ConfigMap, error)
}, oracle *kubernetes.Clientset) {
	i := int(p.touch.Add(1)-1) % p.objects
	p.mu.Lock()
	if p.busy[i] {
		p.mu.Unlock()
		return
	}
	p.busy[i] = true
	cur, unknown := p.value[i], p.unknown[i]
	p.mu.Unlock()
	ok := true
	if unknown {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cm, err := oracle.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, p.objName(i), metav1.GetOptions{})
		cancel()
		if ok = err == nil; ok {
			cur, _ = strconv.Atoi(cm.Data["n"])
		}
	}
	if ok {
		ok = p.timed("update", func(ctx context.Context) error {
			_, err := cms.Update(ctx, p.object(i, cur+1), metav1.UpdateOptions{})
			return err
		})
		unknown = !ok
		if ok {
			cur++
		}
	}
	p.mu.Lock()
	p.value[i], p.unknown[i], p.busy[i] = cur, unknown, false
	p.mu.Unlock()
}

// timed sends one request (30 s at most) and records it; it reports
// success.
func (p *scalePath) timed(kind string, f func(context.Context) error) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := scaleRequest{kind: kind, start: time.Now()}
	r.err = f(ctx)
	r.end = time.Now()
	p.mu.Lock()
	p.tally = append(p.tally, r)
	p.mu.Unlock()
	return r.err == nil
}

// requests returns the requests recorded so far.
func (p *scalePath) requests() []scaleRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.tally)
}

// finalValues reads every object's last version from the oracle.
func (p *scalePath) finalValues(ctx context.Context, oracle *kubernetes.Clientset) (map[string]int, error) {
	list, err := oracle.CoreV1().ConfigMaps(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "scale=" + p.prefix})
	if err != nil {
		return nil, err
	}
	vals := map[string]int{}
	for _, cm := range list.Items {
		vals[cm.Name], _ = strconv.Atoi(cm.Data["n"])
	}
	return vals, nil
}

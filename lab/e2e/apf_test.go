package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/skewgate/skewgate/lab"
)

// The tenant of TestAPFDecidesWhoWaits: a user whose LISTs APF sends to a
// priority level of its own, one seat's worth.
const (
	apfTenant   = "apf-tenant"
	apfStreams  = 300 // concurrent LIST streams
	apfPhase    = 25 * time.Second
	apfBound    = 50 // --local-max-requests-inflight of the bounded phase
	apfRenewals = 500 * time.Millisecond
)

// TestAPFDecidesWhoWaits (issue 40 item 2): a tenant floods its own
// priority level (1 nominal share, no borrowing, one queue) with
// apfStreams streams of LISTs against node-b, in three phases: directly,
// through node-b's skewgate as shipped (no bound), and through it with
// --local-max-requests-inflight=apfBound. Meanwhile node-b's node Lease
// is renewed as system:node:node-b and kube-controller-manager's
// leader-election Lease as system:kube-controller-manager, twice a
// second. APF isolates both (system-node-high, system-leader-election):
// not one renewal may fail in any phase. skewgate's bound, counting the
// tenant's requests while they wait in APF's queue, fills with them; what
// APF isolates must pass it.
func TestAPFDecidesWhoWaits(t *testing.T) {
	b := node(t, "node-b")
	admin := scaleClient(t, b.URL(), nil)
	apfTenantSetup(t, admin)
	ca, err := lab.LoadCA(plane.PKI.CAFile, plane.PKI.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tenant := issueTo(t, ca, dir, "tenant", lab.Leaf{CN: apfTenant})
	nodeB := issueTo(t, ca, dir, "node-b", lab.Leaf{CN: "system:node:node-b", Orgs: []string{"system:nodes"}})
	kcm := issueTo(t, ca, dir, "kcm", lab.Leaf{CN: "system:kube-controller-manager"})
	apfWaitForLevel(t, tenant, b)

	var report []string
	for _, ph := range []struct {
		name  string
		extra []string // nil: no skewgate on node-b
	}{
		{"directly", nil},
		{"through skewgate as shipped", []string{}},
		{fmt.Sprintf("through skewgate with --local-max-requests-inflight=%d", apfBound), []string{fmt.Sprintf("--local-max-requests-inflight=%d", apfBound)}},
	} {
		var proc *lab.Proc
		if ph.extra != nil {
			p, err := plane.StartSkewgate(context.Background(), b.Name, skewgateBin, lab.SkewgateMode{Steering: true, Kubeconfig: true, SteeringMode: "always", Extra: ph.extra}, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			proc = &p
		}
		fresh := freshConns(t)
		waitFor(t, 15*time.Second, ph.name+": steering as the phase wants", func() bool {
			return steered(do(t, fresh, http.MethodGet, b.URL()+"/api/v1/namespaces/default/configmaps?limit=1", nil)) == (proc != nil)
		})
		r := apfRunPhase(t, b, tenant, nodeB, kcm)
		r.name = ph.name
		if proc != nil {
			r.throttled = metricValues(lab.SkewgateAdminURL(b)+"/metrics", apfThrottled)[apfThrottled]
			proc.Stop(10 * time.Second)
		}
		t.Logf("%s: %s", ph.name, r)
		report = append(report, r.row())
		if r.failed.Load() > 0 {
			t.Errorf("%s: %d of %d renewals failed (first: %v)", ph.name, r.failed.Load(), r.renewals.Load(), r.firstFailures())
		}
		if r.renewals.Load() < int64(apfPhase/apfRenewals) {
			t.Errorf("%s: only %d renewals in %s, want two a second for each of two leases", ph.name, r.renewals.Load(), apfPhase)
		}
		if r.tenantOK.Load() == 0 {
			t.Errorf("%s: none of the tenant's LISTs was answered", ph.name)
		}
	}
	t.Logf("| phase | renewals | failed | slowest renewal | tenant LISTs answered | tenant mean queue wait | APF's 429s to the tenant | skewgate's own 429s |\n|---|---|---|---|---|---|---|---|\n%s", strings.Join(report, "\n"))
}

// apfThrottled is node-b's skewgate's count of its own 429s for its local
// apiserver.
const apfThrottled = `skewgate_requests_throttled_total{server="127.0.0.1:6443"}`

// apfTenantSetup makes the tenant's namespace, objects, RBAC, priority
// level and FlowSchema (idempotently); the level and the schema go at the
// end of the test.
func apfTenantSetup(t *testing.T, cs *kubernetes.Clientset) {
	ctx := context.Background()
	exists := func(err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: apfTenant}}, metav1.CreateOptions{})
	exists(err)
	data := strings.Repeat("x", 2048)
	for i := range 100 {
		_, err := cs.CoreV1().ConfigMaps(apfTenant).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)}, Data: map[string]string{"d": data}}, metav1.CreateOptions{})
		exists(err)
	}
	_, err = cs.RbacV1().Roles(apfTenant).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: apfTenant},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}}, metav1.CreateOptions{})
	exists(err)
	_, err = cs.RbacV1().RoleBindings(apfTenant).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: apfTenant},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: apfTenant},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: apfTenant}}}, metav1.CreateOptions{})
	exists(err)
	_, err = cs.FlowcontrolV1().PriorityLevelConfigurations().Create(ctx, &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: apfTenant},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited, Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
			NominalConcurrencyShares: ptr.To[int32](1), LendablePercent: ptr.To[int32](0), BorrowingLimitPercent: ptr.To[int32](0),
			LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue,
				Queuing: &flowcontrolv1.QueuingConfiguration{Queues: 1, HandSize: 1, QueueLengthLimit: 128}}}}}, metav1.CreateOptions{})
	exists(err)
	_, err = cs.FlowcontrolV1().FlowSchemas().Create(ctx, &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: apfTenant},
		Spec: flowcontrolv1.FlowSchemaSpec{PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: apfTenant}, MatchingPrecedence: 1000,
			DistinguisherMethod: &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects:      []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: apfTenant}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, Namespaces: []string{apfTenant}}},
			}}}}, metav1.CreateOptions{})
	exists(err)
	t.Cleanup(func() {
		cs.FlowcontrolV1().FlowSchemas().Delete(ctx, apfTenant, metav1.DeleteOptions{})
		cs.FlowcontrolV1().PriorityLevelConfigurations().Delete(ctx, apfTenant, metav1.DeleteOptions{})
	})
}

// apfWaitForLevel waits until node-b authorizes the tenant and its APF puts
// the tenant's LIST in the tenant's level.
func apfWaitForLevel(t *testing.T, tenant lab.KeyPair, b lab.Node) {
	pl, err := scaleClient(t, b.URL(), nil).FlowcontrolV1().PriorityLevelConfigurations().Get(context.Background(), apfTenant, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, tenant)
	waitFor(t, 30*time.Second, "node-b's APF classifies the tenant's LISTs into its level", func() bool {
		r := do(t, c, http.MethodGet, b.URL()+apfListPath, nil)
		return r.Code == http.StatusOK && r.Header.Get("X-Kubernetes-PF-PriorityLevel-UID") == string(pl.UID)
	})
}

const apfListPath = "/api/v1/namespaces/" + apfTenant + "/configmaps"

// apfResult is one phase's outcome.
type apfResult struct {
	name                   string
	renewals, failed       atomic.Int64
	slowest                atomic.Int64 // ns
	mu                     sync.Mutex
	failures               []string
	tenantOK, tenantAPF429 atomic.Int64
	tenantOwn429, tenantEl atomic.Int64 // skewgate's own 429s; anything else
	wait                   float64      // the tenant's mean wait in APF's queue, s
	waited                 float64      // requests that waited and executed
	throttled              float64      // skewgate_requests_throttled_total
}

func (r *apfResult) fail(what string) {
	r.failed.Add(1)
	r.mu.Lock()
	if len(r.failures) < 5 {
		r.failures = append(r.failures, what)
	}
	r.mu.Unlock()
}

func (r *apfResult) firstFailures() []string { r.mu.Lock(); defer r.mu.Unlock(); return r.failures }

func (r *apfResult) String() string {
	return fmt.Sprintf("renewals %d, failed %d %v, slowest %s; tenant LISTs answered %d, APF's 429s %d, skewgate's 429s %d (its counter %.0f), other answers %d; tenant mean queue wait %.3f s over %.0f requests",
		r.renewals.Load(), r.failed.Load(), r.firstFailures(), time.Duration(r.slowest.Load()).Round(time.Millisecond), r.tenantOK.Load(),
		r.tenantAPF429.Load(), r.tenantOwn429.Load(), r.throttled, r.tenantEl.Load(), r.wait, r.waited)
}

func (r *apfResult) row() string {
	return fmt.Sprintf("| %s | %d | %d | %s | %d | %.2f s | %d | %d |", r.name, r.renewals.Load(), r.failed.Load(),
		time.Duration(r.slowest.Load()).Round(time.Millisecond), r.tenantOK.Load(), r.wait, r.tenantAPF429.Load(), r.tenantOwn429.Load())
}

// apfRunPhase floods node-b's address with the tenant's LISTs for apfPhase
// while both leases are renewed, and reads node-b's APF wait for the
// tenant's level before and after.
func apfRunPhase(t *testing.T, b lab.Node, tenant, nodeB, kcm lab.KeyPair) *apfResult {
	r := &apfResult{}
	sum0, n0 := apfWait(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), apfPhase)
	defer cancel()
	var wg sync.WaitGroup
	conns := make([]*http.Client, apfStreams/50)
	for i := range conns {
		conns[i] = apfClient(t, tenant)
	}
	for i := range apfStreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			apfTenantStream(ctx, conns[i%len(conns)], b.URL()+apfListPath, r)
		}()
	}
	for _, l := range []struct {
		kp       lab.KeyPair
		ns, name string
		holder   string
		seconds  int32
	}{{nodeB, "kube-node-lease", "node-b", "node-b", 40}, {kcm, "kube-system", "kube-controller-manager", "apf-test_kcm", 15}} {
		wg.Add(1)
		c := apfClient(t, l.kp)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(apfRenewals)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				start := time.Now()
				err := apfRenew(c, b.URL(), l.ns, l.name, l.holder, l.seconds)
				d := time.Since(start)
				r.renewals.Add(1)
				for {
					old := r.slowest.Load()
					if int64(d) <= old || r.slowest.CompareAndSwap(old, int64(d)) {
						break
					}
				}
				if err != nil {
					r.fail(fmt.Sprintf("%s/%s: %v", l.ns, l.name, err))
				}
			}
		}()
	}
	wg.Wait()
	sum1, n1 := apfWait(t, b)
	if n1 > n0 {
		r.wait, r.waited = (sum1-sum0)/(n1-n0), n1-n0
	}
	return r
}

// apfClient speaks HTTP/2, as client-go does, presenting kp.
func apfClient(t *testing.T, kp lab.KeyPair) *http.Client {
	c := client(t, kp)
	tr := c.Transport.(*http.Transport)
	tr.ForceAttemptHTTP2 = true
	tr.MaxIdleConnsPerHost = 10
	c.Timeout = 0
	return c
}

// apfTenantStream LISTs until ctx ends; a 429 (APF's or skewgate's) waits
// 100 ms, as a client that backs off a little.
func apfTenantStream(ctx context.Context, c *http.Client, url string, r *apfResult) {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				r.tenantEl.Add(1)
				time.Sleep(100 * time.Millisecond)
			}
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			r.tenantOK.Add(1)
			continue
		case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("X-Skewgate-Server") == "skewgate":
			r.tenantOwn429.Add(1)
		case resp.StatusCode == http.StatusTooManyRequests:
			r.tenantAPF429.Add(1)
		default:
			r.tenantEl.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// apfRenew renews a Lease as a leader or a kubelet does: read it (create
// it when missing), then write it back with a new renew time, each step
// within 5 s. Any answer but success is a failed renewal: client-go would
// retry a 429, but a renewal late past its deadline is a lost lease.
func apfRenew(c *http.Client, base, ns, name, holder string, seconds int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	url := fmt.Sprintf("%s/apis/coordination.k8s.io/v1/namespaces/%s/leases", base, ns)
	code, body, hdr, err := apfDo(ctx, c, http.MethodGet, url+"/"+name, nil)
	if err != nil {
		return err
	}
	now := metav1.NewMicroTime(time.Now())
	var lease coordinationv1.Lease
	switch code {
	case http.StatusOK:
		if err := json.Unmarshal(body, &lease); err != nil {
			return err
		}
	case http.StatusNotFound:
		lease = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	default:
		return fmt.Errorf("get: %d from %s: %s", code, hdr.Get("X-Skewgate-Server"), trim(body))
	}
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &holder, &seconds, &now
	out, _ := json.Marshal(&lease)
	method, target, want := http.MethodPut, url+"/"+name, http.StatusOK
	if code == http.StatusNotFound {
		method, target, want = http.MethodPost, url, http.StatusCreated
	}
	code, body, hdr, err = apfDo(ctx, c, method, target, out)
	if err != nil {
		return err
	}
	if code != want {
		return fmt.Errorf("%s: %d from %s: %s", strings.ToLower(method), code, hdr.Get("X-Skewgate-Server"), trim(body))
	}
	return nil
}

func apfDo(ctx context.Context, c *http.Client, method, url string, body []byte) (int, []byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, resp.Header, err
}

// apfWait reads node-b's apiserver_flowcontrol_request_wait_duration_seconds
// for the tenant's level, requests that waited and then executed: the sum
// and the count.
func apfWait(t *testing.T, b lab.Node) (sum, count float64) {
	c := client(t, plane.PKI.Admin)
	r := do(t, c, http.MethodGet, b.URL()+"/metrics", nil)
	if r.Code != http.StatusOK {
		t.Fatalf("node-b /metrics: %d", r.Code)
	}
	for _, line := range strings.Split(string(r.Body), "\n") {
		if !strings.Contains(line, `priority_level="`+apfTenant+`"`) || !strings.Contains(line, `execute="true"`) {
			continue
		}
		var v float64
		switch {
		case strings.HasPrefix(line, "apiserver_flowcontrol_request_wait_duration_seconds_sum{"):
			fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
			sum += v
		case strings.HasPrefix(line, "apiserver_flowcontrol_request_wait_duration_seconds_count{"):
			fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
			count += v
		}
	}
	return sum, count
}

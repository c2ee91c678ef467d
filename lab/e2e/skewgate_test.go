package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/lab"
)

var workloadsGVR = schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"}

// via is node-a's skewgate URL, reached directly (no steering).
func via(t testing.TB) string { return lab.SkewgateURL(node(t, "node-a")) }

// routed asserts the route headers of r.
func routed(t *testing.T, what string, r response, code int, route, server string) {
	t.Helper()
	if r.Code != code || r.Header.Get("X-Skewgate-Route") != route || r.Header.Get("X-Skewgate-Server") != server {
		t.Errorf("%s = %d route=%q server=%q, want %d route=%q server=%q: %s", what, r.Code,
			r.Header.Get("X-Skewgate-Route"), r.Header.Get("X-Skewgate-Server"), code, route, server, trim(r.Body))
	}
}

func trim(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

func TestWorkloadsAnsweredByPeer(t *testing.T) {
	admin, sg, b := client(t, plane.PKI.Admin), via(t), node(t, "node-b").IP.String()+":6443"
	routed(t, "list", do(t, admin, http.MethodGet, sg+workloadsPath, nil), 200, "peer", b)
	routed(t, "create", do(t, admin, http.MethodPost, sg+workloadsPath, workloadJSON("via-skewgate")), 201, "peer", b)
	routed(t, "get", do(t, admin, http.MethodGet, sg+workloadsPath+"/via-skewgate", nil), 200, "peer", b)
	routed(t, "delete", do(t, admin, http.MethodDelete, sg+workloadsPath+"/via-skewgate", nil), 200, "peer", b)
	routed(t, "get deleted", do(t, admin, http.MethodGet, sg+workloadsPath+"/via-skewgate", nil), 404, "peer", b)
}

// Bug: merged /apis lists admissionregistration.k8s.io/v1
// mutatingadmissionpolicies (v1.36 only), but the per-group-version
// document and its OpenAPI schema came from the local v1.35 server, which
// lacks it: kubectl explain and legacy-discovery clients could not find
// the type. They come from the peer whose documents list it.
func TestSharedGroupVersionDocumentsListWhatPeersAdd(t *testing.T) {
	admin, sg, b := client(t, plane.PKI.Admin), via(t), node(t, "node-b").IP.String()+":6443"
	r := do(t, admin, http.MethodGet, sg+"/apis/admissionregistration.k8s.io/v1", nil)
	routed(t, "group/version document", r, 200, "peer", b)
	if !strings.Contains(string(r.Body), `"name":"mutatingadmissionpolicies"`) {
		t.Errorf("/apis/admissionregistration.k8s.io/v1 through skewgate lacks mutatingadmissionpolicies: %s", trim(r.Body))
	}
	r = do(t, admin, http.MethodGet, sg+"/openapi/v3/apis/admissionregistration.k8s.io/v1", nil)
	routed(t, "group/version schema", r, 200, "peer", b)
	if !strings.Contains(string(r.Body), "MutatingAdmissionPolicy") {
		t.Errorf("the OpenAPI schema through skewgate lacks MutatingAdmissionPolicy")
	}
	r = do(t, admin, http.MethodGet, sg+"/apis/apps/v1", nil)
	routed(t, "a group/version both list alike", r, 200, "local", "127.0.0.1:6443")
}

func TestCoreAnsweredLocally(t *testing.T) {
	r := do(t, client(t, plane.PKI.Admin), http.MethodGet, via(t)+"/api/v1/namespaces", nil)
	routed(t, "list namespaces", r, 200, "local", "127.0.0.1:6443")
}

func TestUnknownResourceIsGenuine404(t *testing.T) {
	r := do(t, client(t, plane.PKI.Admin), http.MethodGet, via(t)+"/apis/example.com/v1/namespaces/default/widgets", nil)
	routed(t, "list widgets", r, 404, "local", "127.0.0.1:6443")
}

func TestIdentity(t *testing.T) {
	user, admin, sg := client(t, plane.PKI.User), client(t, plane.PKI.Admin), via(t)
	spoof := []string{"X-Remote-User", "lab-admin", "X-Remote-Group", "system:masters", "X-Remote-Extra-Scopes", "all"}
	for _, path := range []string{"/api/v1/namespaces", workloadsPath} {
		if r := do(t, user, http.MethodGet, sg+path, nil); r.Code != http.StatusForbidden || !strings.Contains(string(r.Body), `User \"lab-user\"`) {
			t.Errorf("user GET %s = %d, want the apiserver's 403 for lab-user: %s", path, r.Code, trim(r.Body))
		}
		if r := do(t, user, http.MethodGet, sg+path, nil, spoof...); r.Code != http.StatusForbidden || !strings.Contains(string(r.Body), `User \"lab-user\"`) {
			t.Errorf("user GET %s with forged X-Remote-* = %d, want 403 for lab-user: %s", path, r.Code, trim(r.Body))
		}
	}
	// A client's peer mark only forces the answer of the server it reached
	// (rule 2), the one it could ask directly: node-a's own 404.
	r := do(t, admin, http.MethodGet, sg+workloadsPath, nil, "X-Kubernetes-Peer-Proxied", "true")
	routed(t, "list with a client's peer mark", r, 404, "local", "127.0.0.1:6443")

	r = do(t, admin, http.MethodGet, sg+"/api/v1/namespaces", nil, "Audit-ID", "e2e-audit-1")
	if got := r.Header.Values("Audit-ID"); len(got) != 1 || got[0] != "e2e-audit-1" {
		t.Errorf("Audit-ID = %q, want the client's, once", got)
	}
}

// TestUpgradeCarriesIdentity sends an exec upgrade: the lab has no kubelet,
// so the best a request can get is the apiserver's 404 for the pod, which
// it only answers after authorizing the caller.
func TestUpgradeCarriesIdentity(t *testing.T) {
	path := via(t) + "/api/v1/namespaces/default/pods/nope/exec?command=true&stdout=true"
	hdr := []string{"Connection", "Upgrade", "Upgrade", "SPDY/3.1", "X-Stream-Protocol-Version", "v4.channel.k8s.io"}
	if r := do(t, client(t, plane.PKI.Admin), http.MethodPost, path, nil, hdr...); r.Code != http.StatusNotFound {
		t.Errorf("admin exec upgrade = %d, want 404 for the pod: %s", r.Code, trim(r.Body))
	}
	spoofed := append(hdr, "X-Remote-User", "lab-admin", "X-Remote-Group", "system:masters")
	if r := do(t, client(t, plane.PKI.User), http.MethodPost, path, nil, spoofed...); r.Code != http.StatusForbidden {
		t.Errorf("user exec upgrade with forged identity = %d, want 403: %s", r.Code, trim(r.Body))
	}
}

func restConfig(t *testing.T, host string) *rest.Config {
	return &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{
		CAFile: plane.PKI.CAFile, CertFile: plane.PKI.Admin.CertFile, KeyFile: plane.PKI.Admin.KeyFile}}
}

// TestLegacyGroupMerged: unaggregated /apis/scheduling.k8s.io lists
// node-b's v1alpha2 beside node-a's v1, keeping node-a's preferred version;
// a group both serve alike still comes from node-a.
func TestLegacyGroupMerged(t *testing.T) {
	admin := client(t, plane.PKI.Admin)
	r := do(t, admin, http.MethodGet, via(t)+"/apis/scheduling.k8s.io", nil)
	routed(t, "legacy /apis/scheduling.k8s.io", r, http.StatusOK, "merged", "skewgate")
	var g metav1.APIGroup
	if err := json.Unmarshal(r.Body, &g); err != nil {
		t.Fatalf("%v: %s", err, trim(r.Body))
	}
	var versions []string
	for _, v := range g.Versions {
		versions = append(versions, v.GroupVersion)
	}
	if g.Kind != "APIGroup" || !slices.Contains(versions, "scheduling.k8s.io/v1") || !slices.Contains(versions, "scheduling.k8s.io/v1alpha2") || g.PreferredVersion.Version != "v1" {
		t.Errorf("merged group: kind %q versions %v preferred %q", g.Kind, versions, g.PreferredVersion.Version)
	}
	routed(t, "legacy /apis/apps", do(t, admin, http.MethodGet, via(t)+"/apis/apps", nil), http.StatusOK, "local", "127.0.0.1:6443")
}

func TestClientGoDiscoverySeesPeerGroup(t *testing.T) {
	dc, err := discovery.NewDiscoveryClientForConfig(restConfig(t, via(t)))
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatalf("discovery through skewgate: %v", err)
	}
	found := false
	for _, l := range lists {
		if l.GroupVersion != workloadsGVR.GroupVersion().String() {
			continue
		}
		for _, r := range l.APIResources {
			found = found || r.Name == "workloads"
		}
	}
	if !found {
		t.Fatal("client-go discovery through skewgate does not list scheduling.k8s.io/v1alpha2 workloads")
	}
	paths, err := dc.OpenAPIV3().Paths()
	if err != nil {
		t.Fatalf("openapi v3 root through skewgate: %v", err)
	}
	gv, ok := paths["apis/"+workloadsGVR.GroupVersion().String()]
	if !ok {
		t.Fatal("the openapi v3 root through skewgate lacks scheduling.k8s.io/v1alpha2")
	}
	if schema, err := gv.Schema("application/json"); err != nil || !strings.Contains(string(schema), "io.k8s.api.scheduling.v1alpha2.Workload") {
		t.Errorf("workloads schema through skewgate: %v (%d bytes)", err, len(schema))
	}
	direct, err := discovery.NewDiscoveryClientForConfig(restConfig(t, node(t, "node-a").URL()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.ServerResourcesForGroupVersion(workloadsGVR.GroupVersion().String()); err == nil {
		t.Error("node-a lists scheduling.k8s.io/v1alpha2 directly: the lab no longer shows the skew")
	}
}

func TestWatchSeesObjectCreatedOnPeer(t *testing.T) {
	dyn, err := dynamic.NewForConfig(restConfig(t, via(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := dyn.Resource(workloadsGVR).Namespace("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch through skewgate: %v", err)
	}
	defer w.Stop()
	admin := client(t, plane.PKI.Admin)
	b := node(t, "node-b").URL()
	if r := do(t, admin, http.MethodPost, b+workloadsPath, workloadJSON("watched")); r.Code != http.StatusCreated {
		t.Fatalf("create via node-b = %d: %s", r.Code, trim(r.Body))
	}
	defer do(t, admin, http.MethodDelete, b+workloadsPath+"/watched", nil)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed before the event arrived")
			}
			if ev.Type == watch.Added && objectName(ev.Object) == "watched" {
				return
			}
		case <-ctx.Done():
			t.Fatal("no ADDED event through skewgate for an object created on node-b")
		}
	}
}

func objectName(o any) string {
	m, ok := o.(interface{ GetName() string })
	if !ok {
		return ""
	}
	return m.GetName()
}

// TestUntrustedCertificatesRejected: a certificate from a CA nobody
// configured, and a front-proxy certificate whose name is not an allowed
// peer, both get skewgate's 401 — neither reaches an apiserver as a user
// or as a peer, and the answer says nothing of why (the log does).
func TestUntrustedCertificatesRejected(t *testing.T) {
	dir := t.TempDir()
	rogue, err := lab.NewCA("rogue-ca")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]lab.KeyPair{
		"unknown CA":            issueTo(t, rogue, dir, "rogue", lab.Leaf{CN: "lab-admin", Orgs: []string{"system:masters"}}),
		"front-proxy, wrong CN": issueFrontProxy(t, dir),
	}
	for name, kp := range cases {
		r := do(t, insistingClient(t, kp), http.MethodGet, via(t)+workloadsPath, nil, "X-Remote-User", "lab-admin", "X-Remote-Group", "system:masters")
		// No route headers: an unauthenticated caller learns nothing of
		// how skewgate routes.
		if r.Code != http.StatusUnauthorized || r.Header.Get("X-Skewgate-Route") != "" || r.Header.Get("X-Skewgate-Server") != "" ||
			!strings.Contains(string(r.Body), `"reason":"Unauthorized"`) ||
			strings.Contains(string(r.Body), "x509") || strings.Contains(string(r.Body), "certificate") {
			t.Errorf("%s: %d route=%q, want skewgate's 401 without route headers: %s", name, r.Code, r.Header.Get("X-Skewgate-Route"), trim(r.Body))
		}
	}
}

// insistingClient sends its certificate even when the server's list of
// acceptable CAs does not name its issuer (Go's client would then send
// none): what a forging client does.
func insistingClient(t *testing.T, kp lab.KeyPair) *http.Client {
	t.Helper()
	c := client(t, lab.KeyPair{})
	cert, err := tls.LoadX509KeyPair(kp.CertFile, kp.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Transport.(*http.Transport)
	tr.TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	return c
}

// TestAnonymousStaysAnonymous: a client without credentials (a load
// balancer's health check) gets through skewgate what it gets directly.
func TestAnonymousStaysAnonymous(t *testing.T) {
	anon := client(t, lab.KeyPair{})
	a := node(t, "node-a").URL()
	aggregated := []string{"Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"}
	for _, req := range []struct {
		path string
		hdr  []string
	}{{"/readyz", nil}, {"/version", nil}, {"/api/v1/namespaces", nil}, {"/apis", aggregated}, {"/apis", nil}, {"/apis/scheduling.k8s.io", nil}, {"/openapi/v3", nil}} {
		direct := do(t, anon, http.MethodGet, a+req.path, nil, req.hdr...)
		through := do(t, anon, http.MethodGet, via(t)+req.path, nil, req.hdr...)
		if direct.Code != through.Code {
			t.Errorf("anonymous GET %s %v: %d through skewgate, %d directly", req.path, req.hdr, through.Code, direct.Code)
		}
	}
}

func issueTo(t *testing.T, ca *lab.CA, dir, name string, leaf lab.Leaf) lab.KeyPair {
	t.Helper()
	cert, key, err := ca.Sign(leaf)
	if err != nil {
		t.Fatal(err)
	}
	kp := lab.KeyPair{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key")}
	if err := lab.WriteCert(kp.CertFile, cert); err != nil {
		t.Fatal(err)
	}
	if err := lab.WriteKey(kp.KeyFile, key); err != nil {
		t.Fatal(err)
	}
	return kp
}

// issueFrontProxy signs "evil-proxy" with the lab's real front-proxy CA:
// trusted issuer, name not in --requestheader-allowed-names.
func issueFrontProxy(t *testing.T, dir string) lab.KeyPair {
	t.Helper()
	ca, err := lab.LoadCA(plane.PKI.FrontProxyCA, plane.PKI.FrontProxyCAKey)
	if err != nil {
		t.Fatal(err)
	}
	return issueTo(t, ca, dir, "evil-proxy", lab.Leaf{CN: "evil-proxy"})
}

// TestVerifiedPeerHop: a request from a verified peer (the front-proxy
// certificate) that carries the peer-proxied mark is answered locally —
// one hop, never a loop — as the user the peer asserts; without the mark
// it is routed like any other.
func TestVerifiedPeerHop(t *testing.T) {
	peer := client(t, plane.PKI.FrontProxyClient)
	as := []string{"X-Remote-User", "lab-admin", "X-Remote-Group", "system:masters"}
	marked := append([]string{"X-Kubernetes-Peer-Proxied", "true"}, as...)
	routed(t, "marked peer request", do(t, peer, http.MethodGet, via(t)+workloadsPath, nil, marked...), http.StatusNotFound, "local", "127.0.0.1:6443")
	routed(t, "unmarked peer request", do(t, peer, http.MethodGet, via(t)+workloadsPath, nil, as...), http.StatusOK, "peer", node(t, "node-b").IP.String()+":6443")
	if r := do(t, peer, http.MethodGet, via(t)+"/api/v1/namespaces", nil, "X-Remote-User", "lab-user"); r.Code != http.StatusForbidden {
		t.Errorf("peer asserting lab-user = %d, want lab-user's 403: %s", r.Code, trim(r.Body))
	}
}

// TestOperatorCommands runs `skewgate routes` and `skewgate explain`
// against node-a's skewgate as an operator would.
func TestOperatorCommands(t *testing.T) {
	adminURL := lab.SkewgateAdminURL(node(t, "node-a"))
	b := node(t, "node-b").IP.String() + ":6443"
	out, err := exec.Command(skewgateBin, "routes", "--admin", adminURL).CombinedOutput()
	if err != nil {
		t.Fatalf("skewgate routes: %v\n%s", err, out)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 2 {
			rows[f[0]] = line
		}
	}
	if !strings.Contains(rows[b], " healthy ") || !strings.Contains(rows["127.0.0.1:6443"], " healthy ") {
		t.Errorf("servers not listed healthy:\n%s", out)
	}
	if !strings.Contains(rows["scheduling.k8s.io/v1alpha2/workloads"], "peer") || !strings.Contains(rows["scheduling.k8s.io/v1alpha2/workloads"], b) {
		t.Errorf("workloads not routed to %s:\n%s", b, out)
	}
	t.Logf("skewgate routes:\n%s", out)
	out, err = exec.Command(skewgateBin, "explain", "--admin", adminURL, "GET", workloadsPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "peer (rule 4) → "+b) {
		t.Errorf("skewgate explain: %v\n%s", err, out)
	}
}

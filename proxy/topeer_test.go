package proxy

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy/forward"
	"github.com/skewgate/skewgate/proxy/route"
)

// peerStandIn is a peer apiserver's stand-in that serves workloads
// (scheduling.k8s.io/v1alpha2), which the rig's local server does not, and
// records every request it is sent.
type peerStandIn struct {
	url *url.URL
	mu  sync.Mutex
	got []seen
	// clientCNs are the common names of the client certificates its
	// requests came with ("" for none).
	clientCNs []string
}

const peerWorkloads = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads"

var peerAPIs = `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[{"metadata":{"name":"scheduling.k8s.io","creationTimestamp":null},` +
	`"versions":[{"version":"v1alpha2","resources":[{"resource":"workloads","responseKind":{"group":"scheduling.k8s.io","version":"v1alpha2","kind":"Workload"},` +
	`"scope":"Namespaced","singularResource":"workload","verbs":["create","delete","get","list","patch","update","watch"]}],"freshness":"Current"}]}]}`

// peerCoreAPI is the stand-in's core/v1: configmaps, as the rig's local
// server, and pods with their connect subresources, which the local
// server does not serve: a pod's exec, attach and port-forward upgrades
// route to the peer.
var peerCoreAPI = `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[{"metadata":{"creationTimestamp":null},` +
	`"versions":[{"version":"v1","resources":[{"resource":"configmaps","responseKind":{"group":"","version":"v1","kind":"ConfigMap"},` +
	`"scope":"Namespaced","singularResource":"configmap","verbs":["create","delete","get","list","patch","update","watch"]},` +
	`{"resource":"pods","responseKind":{"group":"","version":"v1","kind":"Pod"},"scope":"Namespaced","singularResource":"pod",` +
	`"verbs":["create","delete","get","list","patch","update","watch"],"subresources":[` +
	`{"subresource":"exec","responseKind":{"group":"","version":"v1","kind":"PodExecOptions"},"verbs":["create","get"]},` +
	`{"subresource":"attach","responseKind":{"group":"","version":"v1","kind":"PodAttachOptions"},"verbs":["create","get"]},` +
	`{"subresource":"portforward","responseKind":{"group":"","version":"v1","kind":"PodPortForwardOptions"},"verbs":["create","get"]},` +
	`{"subresource":"log","responseKind":{"group":"","version":"v1","kind":"Pod"},"verbs":["get"]}]}],"freshness":"Current"}]}]}`

// newPeerStandIn serves with a certificate the rig's CA signs for leaf.
func (rig *identityRig) newPeerStandIn(t *testing.T, leaf lab.Leaf) *peerStandIn {
	t.Helper()
	p := &peerStandIn{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := ""
		if len(r.TLS.PeerCertificates) > 0 {
			cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		p.mu.Lock()
		p.got = append(p.got, seen{r.URL.RequestURI(), r.Header.Clone(), nil})
		p.clientCNs = append(p.clientCNs, cn)
		p.mu.Unlock()
		if strings.Contains(r.Header.Get("Accept"), "g=apidiscovery.k8s.io") {
			w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
			if r.URL.Path == "/apis" {
				io.WriteString(w, peerAPIs)
				return
			}
			io.WriteString(w, peerCoreAPI)
			return
		}
		if r.URL.Path == "/apis/authentication.k8s.io/v1/selfsubjectreviews" {
			review(w, r) // the same cluster's authenticators
			return
		}
		if r.Header.Get("Authorization") != "" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Upgrade") != "" { // answered like exec with a wrong container
			http.Error(w, "container wrong is not valid", http.StatusBadRequest)
			return
		}
		io.WriteString(w, "peer")
	}))
	cert, key, err := rig.ca.Sign(leaf)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}}, ClientAuth: tls.RequestClientCert}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	p.url, _ = url.Parse(srv.URL)
	return p
}

// take returns what the stand-in was sent on path since the last take.
func (p *peerStandIn) take(path string) (got []seen, clientCNs []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, s := range p.got {
		if strings.HasPrefix(s.uri, path) {
			got, clientCNs = append(got, s), append(clientCNs, p.clientCNs[i])
		}
	}
	p.got, p.clientCNs = nil, nil
	return got, clientCNs
}

// apiserverLeaf is kubeadm's apiserver.crt for 127.0.0.1.
var apiserverLeaf = lab.Leaf{CN: "kube-apiserver", IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
	DNS: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc"}, Server: true}

// withPeers adds peers to the rig's members and waits until workloads
// route to the first.
func (rig *identityRig) withPeers(t *testing.T, peers ...*peerStandIn) {
	t.Helper()
	var urls []*url.URL
	for _, p := range peers {
		urls = append(urls, p.url)
	}
	rig.members.SetPeers(urls)
	rig.runMembers(t)
	list := route.Request{Kind: route.Resource, Verb: "list", GVR: schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"}}
	deadline := time.Now().Add(20 * time.Second)
	for d := route.Decide(list, rig.members.Table(), false, ""); d.Route != route.Peer; d = route.Decide(list, rig.members.Table(), false, "") {
		if time.Now().After(deadline) {
			t.Fatalf("workloads never routed to the peer: %s (%s); %+v", d.Route, d.Reason, rig.members.Statuses())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Issue 25: skewgate forwarded bearer tokens unchanged to peers, and anyone
// who may write leases in kube-system can add one. A token caller's
// request routed to a peer now goes as the user the local apiserver's
// SelfSubjectReview named — requestheader headers under the front-proxy
// certificate, as for certificate callers and as kube-apiserver's in-tree
// proxy sends it — and the peer never sees the token. What the peer's
// requestheader authenticator reads is the review's user, credential id
// and all; a client's forged identity headers are still stripped, its
// Impersonate-* headers pass for the peer to authorize.
func TestBearerTokenNeverLeavesForAPeer(t *testing.T) {
	rig := newIdentityRig(t)
	peer := rig.newPeerStandIn(t, apiserverLeaf)
	rig.withPeers(t, peer)

	raw := "GET " + peerWorkloads + " HTTP/1.1\nHost: 127.0.0.1\nAuthorization: Bearer good\n" +
		"X-Remote-User: system:admin\nX-Remote-Group: system:masters\nX-Remote-Extra-Scopes: all\nX-Remote-Uid: 0\n" +
		"Impersonate-User: bob\n\n"
	code, hdr, body := rig.sendAnonymous(t, raw)
	if code != http.StatusOK || body != "peer" || hdr.Get(forward.HeaderRoute) != string(route.Peer) {
		t.Fatalf("a token's list of workloads: %d route %q %q, want the peer's 200", code, hdr.Get(forward.HeaderRoute), body)
	}
	got, cns := peer.take(peerWorkloads)
	if len(got) != 1 {
		t.Fatalf("the peer saw %d lists, want 1", len(got))
	}
	h := got[0].header
	if v := h.Values("Authorization"); len(v) != 0 {
		t.Errorf("the peer saw Authorization %q", v)
	}
	if cns[0] != "front-proxy-client" {
		t.Errorf("the peer's client certificate: %q, want the front-proxy client's", cns[0])
	}
	// Read as kube-apiserver's requestheader authenticator reads it.
	names := DefaultHeaderNames()
	auth := headerrequest.NewDynamic(headerrequest.StaticStringSlice(names.User), headerrequest.StaticStringSlice(names.UID),
		headerrequest.StaticStringSlice(names.Group), headerrequest.StaticStringSlice(names.ExtraPrefix))
	resp, ok, err := auth.AuthenticateRequest(&http.Request{Header: h.Clone()})
	if !ok || err != nil {
		t.Fatalf("the peer's requestheader authenticator: %v %v (headers %v)", ok, err, h)
	}
	u := resp.User
	wantGroups := []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}
	if u.GetName() != "system:serviceaccount:kube-system:generic-garbage-collector" || u.GetUID() != "4f7c" || !slices.Equal(u.GetGroups(), wantGroups) {
		t.Errorf("the peer saw %q uid %q groups %v, want the review's user", u.GetName(), u.GetUID(), u.GetGroups())
	}
	wantExtra := map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=9a1b"}, "authentication.kubernetes.io/node-name": {"node-a"}}
	if fmt.Sprint(u.GetExtra()) != fmt.Sprint(wantExtra) {
		t.Errorf("the peer saw extra %v, want the review's %v (the audit log's credential id)", u.GetExtra(), wantExtra)
	}
	if h.Get("Impersonate-User") != "bob" || h.Get(PeerProxiedHeader) != "true" {
		t.Errorf("the peer saw Impersonate-User %q and mark %q, want bob and true", h.Get("Impersonate-User"), h.Get(PeerProxiedHeader))
	}

	// The local server answered the review: the peer was asked nothing.
	if reviews, _ := peer.take("/apis/authentication.k8s.io"); len(reviews) != 0 {
		t.Errorf("the peer was asked %d token reviews while the local apiserver answered", len(reviews))
	}

	// The local route keeps the token: the node's own apiserver judges it.
	rig.mu.Lock()
	rig.got = nil
	rig.mu.Unlock()
	rig.sendAnonymous(t, "GET /api/v1/namespaces/default/configmaps HTTP/1.1\nHost: 127.0.0.1\nAuthorization: Bearer good\n\n")
	rig.mu.Lock()
	local := rig.got
	rig.mu.Unlock()
	if len(local) != 1 || local[0].header.Get("Authorization") != "Bearer good" || local[0].header.Get("X-Remote-User") != "" {
		t.Errorf("the local apiserver saw %d requests (%v); want one, its token untouched", len(local), local)
	}

	// A token the apiserver rejects, or cannot judge: nothing reaches the
	// peer, and the caller learns nothing but 401, 429 or 503.
	for token, want := range map[string]int{"bad": http.StatusUnauthorized, "busy": http.StatusTooManyRequests, "broken": http.StatusServiceUnavailable} {
		code, hdr, _ := rig.sendAnonymous(t, strings.Replace(raw, "Bearer good", "Bearer "+token, 1))
		if got, _ := peer.take(peerWorkloads); len(got) != 0 || code != want || hdr.Get(forward.HeaderServer) == peer.url.Host {
			t.Errorf("token %s: %d from %q, the peer saw %d lists; want %d and none", token, code, hdr.Get(forward.HeaderServer), len(got), want)
		}
		if want != http.StatusUnauthorized && hdr.Get("Retry-After") == "" {
			t.Errorf("token %s: %d without Retry-After", token, code)
		}
	}
}

// A peer listed by a forged lease that presents a kubelet's serving
// certificate (the cluster CA signed it, for its node's address) is never
// healthy: no probe, no discovery read, no request of a caller reaches it.
func TestKubeletPosingAsAPeerGetsNothing(t *testing.T) {
	rig := newIdentityRig(t)
	kubelet := rig.newPeerStandIn(t, lab.Leaf{CN: "system:node:node-x", Orgs: []string{"system:nodes"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNS: []string{"node-x"}, Server: true})
	named := rig.newPeerStandIn(t, lab.Leaf{CN: "system:node:node-y", Orgs: []string{"system:nodes"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNS: []string{"kubernetes.default.svc"}, Server: true})
	peer := rig.newPeerStandIn(t, apiserverLeaf)
	rig.withPeers(t, peer, kubelet, named)
	code, _, _ := rig.sendAnonymous(t, "GET "+peerWorkloads+" HTTP/1.1\nHost: 127.0.0.1\nAuthorization: Bearer good\n\n")
	if code != http.StatusOK {
		t.Errorf("a token's list of workloads: %d, want the genuine peer's 200", code)
	}
	for name, p := range map[string]*peerStandIn{"a kubelet": kubelet, "a node's certificate naming kubernetes.default.svc": named} {
		if got, _ := p.take("/"); len(got) != 0 {
			t.Errorf("%s listed as a peer was sent %d requests (first %s)", name, len(got), got[0].uri)
		}
		for _, st := range rig.members.Statuses() {
			if st.URL == p.url.String() && st.Healthy {
				t.Errorf("%s listed as a peer is healthy", name)
			}
		}
	}
}

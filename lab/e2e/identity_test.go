package e2e

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/skewgate/skewgate/lab"
)

// whoAmI asks the apiserver, through skewgate, who the caller is, with the
// extra headers hdr on an HTTP/1.1 connection.
func whoAmI(t *testing.T, hdr ...string) (string, []string) {
	t.Helper()
	body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	r := do(t, client(t, plane.PKI.Admin), http.MethodPost, via(t)+"/apis/authentication.k8s.io/v1/selfsubjectreviews", body, hdr...)
	if r.Code != http.StatusCreated {
		t.Fatalf("SelfSubjectReview with %v = %d: %s", hdr, r.Code, trim(r.Body))
	}
	var review struct {
		Status struct {
			UserInfo struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(r.Body, &review); err != nil {
		t.Fatal(err)
	}
	return review.Status.UserInfo.Username, review.Status.UserInfo.Groups
}

// Bug seen on the plane: "Connection: X-Remote-Group" made the reverse
// proxy drop the groups skewgate had set; the admin arrived without
// system:masters.
func TestConnectionTokensKeepIdentity(t *testing.T) {
	wantUser, wantGroups := whoAmI(t)
	if !slices.Contains(wantGroups, "system:masters") {
		t.Fatalf("the lab admin is not in system:masters: %v", wantGroups)
	}
	for _, conn := range []string{"X-Remote-Group", "X-Remote-User, X-Remote-Group", "keep-alive, x-remote-extra-authentication.kubernetes.io%2fcredential-id"} {
		user, groups := whoAmI(t, "Connection", conn)
		if user != wantUser || !slices.Equal(groups, wantGroups) {
			t.Errorf("Connection: %s: the apiserver saw %q %v, want %q %v", conn, user, groups, wantUser, wantGroups)
		}
	}
}

// Bug seen on the plane: an exec upgrade through skewgate lost its query,
// so the apiserver did not see container=wrong. Through skewgate it must
// get the answer a direct request gets.
func TestExecUpgradeKeepsQuery(t *testing.T) {
	admin := client(t, plane.PKI.Admin)
	a := node(t, "node-a")
	// The lab runs no controller-manager: the default service account the
	// pod needs is made by hand.
	sa := []byte(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}`)
	if r := do(t, admin, http.MethodPost, a.URL()+"/api/v1/namespaces/default/serviceaccounts", sa); r.Code != http.StatusCreated && r.Code != http.StatusConflict {
		t.Fatalf("create service account: %d %s", r.Code, trim(r.Body))
	}
	pod := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"exec-query"},"spec":{"automountServiceAccountToken":false,"containers":[{"name":"c","image":"pause"}]}}`)
	if r := do(t, admin, http.MethodPost, a.URL()+"/api/v1/namespaces/default/pods", pod); r.Code != http.StatusCreated && r.Code != http.StatusConflict {
		t.Fatalf("create pod: %d %s", r.Code, trim(r.Body))
	}
	path := "/api/v1/namespaces/default/pods/exec-query/exec?command=ls&container=wrong&stdin=false&stdout=true"
	hdr := []string{"Connection", "Upgrade", "Upgrade", "SPDY/3.1", "X-Stream-Protocol-Version", "v4.channel.k8s.io"}
	direct := do(t, admin, http.MethodPost, a.URL()+path, nil, hdr...)
	through := do(t, admin, http.MethodPost, via(t)+path, nil, hdr...)
	if !strings.Contains(string(direct.Body), "container wrong is not valid") {
		t.Fatalf("the apiserver's own answer changed: %d %s", direct.Code, trim(direct.Body))
	}
	if through.Code != direct.Code || string(through.Body) != string(direct.Body) {
		t.Errorf("through skewgate %d %s, directly %d %s", through.Code, trim(through.Body), direct.Code, trim(direct.Body))
	}
}

// Bug: a caller that left while skewgate asked the local apiserver whether
// it may read merged discovery was counted as the local server's connection
// failure, taking it out of routing; with no healthy peer, /apis then
// answered 200 with no groups. Callers here reset their connections
// mid-request, many times: the local server's failure count must not move.
func TestCallerCancellationIsNoServerFailure(t *testing.T) {
	a := node(t, "node-a")
	before := localForwardErrors(t, a)
	cert, err := tls.LoadX509KeyPair(plane.PKI.Admin.CertFile, plane.PKI.Admin.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(via(t))
	for i := range 40 {
		conn, err := tls.Dial("tcp", u.Host, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET /apis HTTP/1.1\r\nHost: %s\r\nAccept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList\r\n\r\n", u.Host)
		time.Sleep(time.Duration(i%8) * 250 * time.Microsecond) // leave at different points of the exchange
		conn.NetConn().(interface{ SetLinger(int) error }).SetLinger(0)
		conn.Close()
	}
	time.Sleep(200 * time.Millisecond)
	if after := localForwardErrors(t, a); after != before {
		t.Errorf("callers' resets counted as %v failures of the local apiserver", after-before)
	}
	r := do(t, client(t, plane.PKI.Admin), http.MethodGet, via(t)+"/apis", nil, "Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
	if r.Code != http.StatusOK || !strings.Contains(string(r.Body), `"apps"`) {
		t.Errorf("merged /apis after the resets: %d %s", r.Code, trim(r.Body))
	}
}

var localErrorsRE = regexp.MustCompile(`(?m)^skewgate_forward_errors_total\{kind="[a-z]+",server="127\.0\.0\.1:6443"\} (\S+)$`)

// localForwardErrors sums skewgate_forward_errors_total for the local
// apiserver on node n's skewgate.
func localForwardErrors(t *testing.T, n lab.Node) float64 {
	t.Helper()
	resp, err := http.Get(lab.SkewgateAdminURL(n) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, m := range localErrorsRE.FindAllStringSubmatch(string(body), -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		sum += v
	}
	return sum
}

// Bug: skewgate stripped only X-Remote-*. The lab's apiservers also trust
// X-Lab-Group (published in kube-system/extension-apiserver-authentication,
// which node-a's skewgate reads), and kube-apiserver unions groups across
// every trusted name: a certificate user sending X-Lab-Group must not
// become system:masters.
func TestEveryTrustedIdentityHeaderStripped(t *testing.T) {
	user := client(t, plane.PKI.User)
	body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	for _, forged := range [][]string{{"X-Lab-Group", "system:masters"}, {"x-lab-group", "system:masters"}, {"X-LAB-GROUP", "system:masters", "X-Lab-Group", "system:masters"}} {
		r := do(t, user, http.MethodPost, via(t)+"/apis/authentication.k8s.io/v1/selfsubjectreviews", body, forged...)
		if r.Code != http.StatusCreated || strings.Contains(string(r.Body), "system:masters") {
			t.Errorf("lab-user with %v: %d %s", forged, r.Code, trim(r.Body))
		}
		if r := do(t, user, http.MethodGet, via(t)+"/api/v1/namespaces/kube-system/secrets", nil, forged...); r.Code != http.StatusForbidden {
			t.Errorf("lab-user with %v listed secrets: %d", forged, r.Code)
		}
	}
}

// Bug: only certificate callers' forwarded requests carried a mark the next
// skewgate honoured; a bearer-token or anonymous request forwarded to a peer
// was routed again there, and two skewgates with mutually stale discovery
// could bounce it. Every forwarded request now carries the mark and every
// marked request is answered locally, whoever sent it: one hop at most.
// An anonymous caller's answers carry no route headers (they would tell it
// which types only peers serve), so node-a's request counter tells the route.
func TestMarkedRequestsAnsweredLocallyWhoeverSends(t *testing.T) {
	anon := client(t, lab.KeyPair{})
	before := workloadListRoutes(t)
	r := do(t, anon, http.MethodGet, via(t)+workloadsPath, nil)
	after := workloadListRoutes(t)
	if r.Header.Get("X-Skewgate-Route") != "" || r.Header.Get("X-Skewgate-Server") != "" {
		t.Errorf("an anonymous caller was told the route: %v", r.Header)
	}
	if after["peer"]-before["peer"] != 1 {
		t.Errorf("an anonymous list of workloads: routes %v, then %v; want one more peer", before, after)
	}
	before = after
	do(t, anon, http.MethodGet, via(t)+workloadsPath, nil, "X-Kubernetes-Peer-Proxied", "true")
	after = workloadListRoutes(t)
	if after["local"]-before["local"] != 1 || after["peer"] != before["peer"] {
		t.Errorf("an anonymous marked list of workloads: routes %v, then %v; want one more local (rule 2)", before, after)
	}
}

// workloadListRoutes is node-a's skewgate_requests_total for lists of
// workloads, by route; a list node-a does not serve locally is labelled
// with resource "unknown".
func workloadListRoutes(t *testing.T) map[string]float64 {
	t.Helper()
	r := do(t, http.DefaultClient, http.MethodGet, lab.SkewgateAdminURL(node(t, "node-a"))+"/metrics", nil)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatalf("node-a's metrics: %v", err)
	}
	out := map[string]float64{}
	for _, m := range fams["skewgate_requests_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["verb"] == "list" && (labels["resource"] == "workloads" || labels["resource"] == "unknown") {
			out[labels["route"]] += m.GetCounter().GetValue()
		}
	}
	return out
}

// The metrics the upgrade-window dashboard reads are there, with the lab's
// real values.
func TestMetricsForTheUpgradeWindow(t *testing.T) {
	a, b := node(t, "node-a"), node(t, "node-b")
	do(t, client(t, plane.PKI.Admin), http.MethodGet, via(t)+workloadsPath, nil) // one request to node-b
	body := ""
	waitFor(t, 15*time.Second, "versions read", func() bool {
		body = string(do(t, http.DefaultClient, http.MethodGet, lab.SkewgateAdminURL(a)+"/metrics", nil).Body)
		return strings.Contains(body, `skewgate_server_info{server="`+b.IP.String()+`:6443",version="v1.36.3"} 1`)
	})
	for _, want := range []string{
		`skewgate_server_info{server="127.0.0.1:6443",version="v1.35.4"} 1`,
		`skewgate_group_version_servers{group_version="scheduling.k8s.io/v1alpha2"} 1`,
		`skewgate_group_version_servers{group_version="apps/v1"} 2`,
		`skewgate_members 2`,
		`skewgate_certificate_expiry_timestamp_seconds{certificate="serving"}`,
		`skewgate_certificate_expiry_timestamp_seconds{certificate="requestheader_ca"}`,
		`skewgate_request_duration_seconds_bucket{route="peer",server="` + b.IP.String() + `:6443"`,
		`skewgate_build_info{build_date=`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("node-a's metrics lack %s", want)
		}
	}
}

// A caller in 1,000 groups — one Impersonate-Group line each, as kubectl
// --as-group sends them — is answered through skewgate as kube-apiserver
// answers it, on the local route and on a peer's: kube-apiserver takes
// 16384 header values, and skewgate's listener must not refuse what it
// takes (Go 1.27's default is 500: a 431 without headercount.Set).
func TestCallerInThousandGroups(t *testing.T) {
	hdr := []string{"Impersonate-User", "bob", "Impersonate-Group", "system:masters"}
	for i := range 999 {
		hdr = append(hdr, "Impersonate-Group", "group-"+strconv.Itoa(i))
	}
	user, groups := whoAmI(t, hdr...)
	if user != "bob" || !slices.Contains(groups, "group-998") || len(groups) < 1000 {
		t.Errorf("through skewgate the apiserver saw %q in %d groups, want bob in 1000", user, len(groups))
	}
	b := node(t, "node-b").IP.String() + ":6443"
	r := do(t, client(t, plane.PKI.Admin), http.MethodGet, via(t)+workloadsPath, nil, hdr...)
	routed(t, "workloads as bob in 1,000 groups", r, http.StatusOK, "peer", b)
}

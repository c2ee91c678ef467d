package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/skewgate/skewgate/lab"
)

// tokenNamespace holds this test's ServiceAccount, RBAC and workloads.
const tokenNamespace = "sg-token"

// Issue 25: skewgate forwarded bearer tokens unchanged to peers, and anyone
// who may write leases in kube-system can add one. Now a ServiceAccount's
// token sent through node-a's skewgate for workloads, which only node-b
// (v1.36) serves, is reviewed by node-a's apiserver, and node-b gets the
// user the review named as requestheader headers under the front-proxy
// certificate. Proven on the real servers:
//   - node-b's answers name the ServiceAccount: its RBAC's 403, then (a
//     RoleBinding to the ServiceAccount's namespace group) its 200, then a
//     ValidatingAdmissionPolicy's denial that echoes the user, groups and
//     credential id node-b saw — equal to the SelfSubjectReview's;
//   - node-b's token authenticator never ran: its
//     authentication_token_cache_request_total does not move through all
//     of that, and moves when the same token is sent to it directly.
func TestTokenNeverReachesThePeer(t *testing.T) {
	admin := client(t, plane.PKI.Admin)
	a, b := node(t, "node-a"), node(t, "node-b")
	peer := b.IP.String() + ":6443"
	mustCreate(t, admin, a.URL()+"/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"`+tokenNamespace+`"}}`)
	t.Cleanup(func() { do(t, admin, http.MethodDelete, a.URL()+"/api/v1/namespaces/"+tokenNamespace, nil) })
	nsURL := a.URL() + "/api/v1/namespaces/" + tokenNamespace
	mustCreate(t, admin, nsURL+"/serviceaccounts", `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"lister"}}`)
	tr := mustCreate(t, admin, nsURL+"/serviceaccounts/lister/token", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":600}}`)
	var tokenRequest struct {
		Status struct{ Token string } `json:"status"`
	}
	if err := json.Unmarshal(tr, &tokenRequest); err != nil || tokenRequest.Status.Token == "" {
		t.Fatalf("token request: %v %s", err, trim(tr))
	}
	bearer := []string{"Authorization", "Bearer " + tokenRequest.Status.Token}
	tokenClient := client(t, lab.KeyPair{})

	// Who node-a's apiserver says the token is.
	r := do(t, tokenClient, http.MethodPost, a.URL()+"/apis/authentication.k8s.io/v1/selfsubjectreviews",
		[]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`), bearer...)
	var review struct {
		Status struct {
			UserInfo struct {
				Username string              `json:"username"`
				Groups   []string            `json:"groups"`
				Extra    map[string][]string `json:"extra"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(r.Body, &review); r.Code != http.StatusCreated || err != nil {
		t.Fatalf("SelfSubjectReview on node-a = %d %v: %s", r.Code, err, trim(r.Body))
	}
	who := review.Status.UserInfo
	credentialID := strings.Join(who.Extra["authentication.kubernetes.io/credential-id"], ",")
	if who.Username != "system:serviceaccount:"+tokenNamespace+":lister" || credentialID == "" {
		t.Fatalf("the token is %q with credential id %q", who.Username, credentialID)
	}

	before := tokenCacheRequests(t, b)
	workloads := via(t) + "/apis/scheduling.k8s.io/v1alpha2/namespaces/" + tokenNamespace + "/workloads"
	r = do(t, tokenClient, http.MethodGet, workloads, nil, bearer...)
	routed(t, "a list of workloads with the token, not allowed", r, http.StatusForbidden, "peer", peer)
	var denied struct{ Message string }
	if json.Unmarshal(r.Body, &denied); !strings.Contains(denied.Message, `User "`+who.Username+`" cannot list resource "workloads"`) {
		t.Errorf("node-b's 403 does not name the ServiceAccount: %s", trim(r.Body))
	}

	// Allowed through the ServiceAccount's namespace group: its groups
	// reached node-b.
	role := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"workloads"},"rules":[{"apiGroups":["scheduling.k8s.io"],"resources":["workloads"],"verbs":["list","create"]}]}`
	binding := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"workloads"},` +
		`"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"workloads"},` +
		`"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"system:serviceaccounts:` + tokenNamespace + `"}]}`
	rbac := a.URL() + "/apis/rbac.authorization.k8s.io/v1/namespaces/" + tokenNamespace
	mustCreate(t, admin, rbac+"/roles", role)
	mustCreate(t, admin, rbac+"/rolebindings", binding)
	r = eventually(t, func() response { return do(t, tokenClient, http.MethodGet, workloads, nil, bearer...) },
		func(r response) bool { return r.Code == http.StatusOK })
	routed(t, "a list of workloads with the token, allowed to its group", r, http.StatusOK, "peer", peer)

	// node-b's admission echoes the identity it saw.
	policy := `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicy","metadata":{"name":"sg-token-echo"},"spec":{` +
		`"failurePolicy":"Fail","matchConstraints":{"resourceRules":[{"apiGroups":["scheduling.k8s.io"],"apiVersions":["v1alpha2"],"operations":["CREATE"],"resources":["workloads"]}],` +
		`"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"` + tokenNamespace + `"}}},` +
		`"validations":[{"expression":"false","messageExpression":"'seen: ' + request.userInfo.username + ' groups=' + request.userInfo.groups.join(',') + ' credential-id=' + ` +
		`('authentication.kubernetes.io/credential-id' in request.userInfo.extra ? request.userInfo.extra['authentication.kubernetes.io/credential-id'].join(',') : 'none')"}]}}`
	vap := a.URL() + "/apis/admissionregistration.k8s.io/v1"
	mustCreate(t, admin, vap+"/validatingadmissionpolicies", policy)
	t.Cleanup(func() { do(t, admin, http.MethodDelete, vap+"/validatingadmissionpolicies/sg-token-echo", nil) })
	mustCreate(t, admin, vap+"/validatingadmissionpolicybindings",
		`{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicyBinding","metadata":{"name":"sg-token-echo"},"spec":{"policyName":"sg-token-echo","validationActions":["Deny"]}}`)
	t.Cleanup(func() { do(t, admin, http.MethodDelete, vap+"/validatingadmissionpolicybindings/sg-token-echo", nil) })
	workload := bytes.ReplaceAll(workloadJSON("echo"), []byte(`"namespace":"default"`), []byte(`"namespace":"`+tokenNamespace+`"`))
	r = eventually(t, func() response { return do(t, tokenClient, http.MethodPost, workloads, workload, bearer...) },
		func(r response) bool { return bytes.Contains(r.Body, []byte("seen: ")) })
	want := fmt.Sprintf("seen: %s groups=%s credential-id=%s", who.Username, strings.Join(who.Groups, ","), credentialID)
	if !bytes.Contains(r.Body, []byte(want)) {
		t.Errorf("node-b's admission saw a different identity:\n got %s\nwant %s", trim(r.Body), want)
	} else {
		t.Logf("node-b's admission: %s", want)
	}
	if r.Header.Get("X-Skewgate-Server") != peer {
		t.Errorf("the create was answered by %q, want node-b", r.Header.Get("X-Skewgate-Server"))
	}

	after := tokenCacheRequests(t, b)
	if after != before {
		t.Errorf("node-b's token authenticator ran %v times while the token's requests went to it through skewgate; want never", after-before)
	}
	// The control: the token sent to node-b directly is authenticated
	// there, and counted.
	do(t, tokenClient, http.MethodGet, b.URL()+"/apis/scheduling.k8s.io/v1alpha2/namespaces/"+tokenNamespace+"/workloads", nil, bearer...)
	if direct := tokenCacheRequests(t, b); direct <= after {
		t.Errorf("node-b's authentication_token_cache_request_total did not count a direct request with the token (%v, then %v): it proves nothing", after, direct)
	}
	t.Logf("node-b's token authenticator: %v before, %v after the requests through skewgate, %v after one sent directly", before, after, tokenCacheRequests(t, b))
}

func mustCreate(t *testing.T, c *http.Client, url, body string) []byte {
	t.Helper()
	r := do(t, c, http.MethodPost, url, []byte(body))
	if r.Code != http.StatusCreated && r.Code != http.StatusOK {
		t.Fatalf("POST %s = %d: %s", url, r.Code, trim(r.Body))
	}
	return r.Body
}

// eventually repeats try until done says so, for up to 15 s (RBAC and
// admission policies reach an apiserver through its informers), and
// returns the last answer.
func eventually(t *testing.T, try func() response, done func(response) bool) response {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := try()
		if done(r) || time.Now().After(deadline) {
			return r
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tokenCacheRequests is node n's apiserver's
// authentication_token_cache_request_total: how often its token
// authenticators were asked, whatever the answer.
func tokenCacheRequests(t *testing.T, n lab.Node) float64 {
	t.Helper()
	r := do(t, client(t, plane.PKI.Admin), http.MethodGet, n.URL()+"/metrics", nil)
	if r.Code != http.StatusOK {
		t.Fatalf("%s's metrics = %d", n.Name, r.Code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatalf("%s's metrics: %v", n.Name, err)
	}
	sum := 0.0
	for _, m := range fams["authentication_token_cache_request_total"].GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

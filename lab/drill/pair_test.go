package drill

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/lab"
)

// served reads what a version serves by default from its recorded
// aggregated discovery (proxy/discovery/testdata; v1.36.3's was recorded
// with the lab's scheduling.k8s.io/v1alpha2 runtime-config).
func served(t *testing.T, version string) map[schema.GroupVersionResource]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "proxy", "discovery", "testdata", version+"-apis-v2.json"))
	if err != nil {
		t.Fatal(err)
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	out := map[schema.GroupVersionResource]bool{}
	for _, g := range list.Items {
		for _, v := range g.Versions {
			for _, r := range v.Resources {
				gvr := schema.GroupVersionResource{Group: g.Name, Version: v.Version, Resource: r.Resource}
				out[gvr] = true
				if r.Scope == apidiscoveryv2.ScopeNamespace {
					out[gvr.GroupVersion().WithResource(r.Resource+"/namespaced")] = true
				}
			}
		}
	}
	return out
}

// Each pair's types are what its To serves and its From does not, the
// owned one namespaced, the other cluster-scoped; its objects name their
// type.
func TestPairs(t *testing.T) {
	if p, err := PairOf(lab.OldVersion, lab.NewVersion); err != nil || p.Owned.GVR.Resource != "workloads" {
		t.Errorf("the default pair: %v %v", p, err)
	}
	if _, err := PairOf(lab.OldVersion, "v1.37.2"); err == nil {
		t.Error("a pair that skips a minor: want an error")
	}
	for _, p := range Pairs {
		from, to := served(t, p.From), served(t, p.To)
		for _, gvr := range p.types() {
			if !to[gvr] || from[gvr] {
				t.Errorf("%s: %s served by %s %t, by %s %t", p, gvr, p.To, to[gvr], p.From, from[gvr])
			}
		}
		if owned := p.Owned.GVR; !to[owned.GroupVersion().WithResource(owned.Resource+"/namespaced")] {
			t.Errorf("%s: %s is not namespaced", p, owned)
		}
		if c := p.Cluster; to[c.GroupVersion().WithResource(c.Resource+"/namespaced")] {
			t.Errorf("%s: %s is namespaced", p, c)
		}
		obj, err := p.Owned.Object("x")
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if obj.GetAPIVersion() != p.Owned.GVR.GroupVersion().String() || obj.GetKind() != p.Owned.Kind || obj.GetName() != "x" {
			t.Errorf("%s: object %v", p, obj.Object)
		}
	}
}

// A PodCertificateRequest carries a stub PKCS#10 request whose signature
// verifies (what kube-apiserver's validation checks), and objects share
// nothing.
func TestPodCertificateRequest(t *testing.T) {
	obj, err := podCertificateRequest("x")
	if err != nil {
		t.Fatal(err)
	}
	spec := obj.Object["spec"].(map[string]any)
	der, err := base64.StdEncoding.DecodeString(spec["stubPKCS10Request"].(string))
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := csr.PublicKey.(ed25519.PublicKey); !ok || csr.CheckSignature() != nil {
		t.Errorf("stub request: key %T, signature %v", csr.PublicKey, csr.CheckSignature())
	}
	spec["podUID"] = "changed"
	if other, _ := podCertificateRequest("y"); other.Object["spec"].(map[string]any)["podUID"] == "changed" {
		t.Error("objects share their spec")
	}
}

// A discovery answer lacks a new type of a group/version it lists when
// the type is not among its resources (1.37's new types are in
// group/versions 1.36 serves), and lacks none of a group/version that
// failed.
func TestListed(t *testing.T) {
	pcr := schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "podcertificaterequests"}
	l := failing(nil)
	l.add(&metav1.APIResourceList{GroupVersion: "certificates.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "certificatesigningrequests"}}})
	if l.has(pcr) {
		t.Error("a 1.36 answer has podcertificaterequests")
	}
	l.add(&metav1.APIResourceList{GroupVersion: "certificates.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "podcertificaterequests"}}})
	if !l.has(pcr) {
		t.Error("a 1.37 answer lacks podcertificaterequests")
	}
	l = failing(nil)
	l.failed[pcr.GroupVersion()] = true
	if !l.has(pcr) {
		t.Error("a failed group/version lacks its types")
	}
}

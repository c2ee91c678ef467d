package drill

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/mod/semver"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/lab"
)

// Pair is one upgrade the drill can run, From → To → From, with the
// types only To serves that its workload uses: a false 404 for them is
// what the drill counts.
type Pair struct {
	From, To string
	// Owned is a namespaced type only To serves: written, read, watched,
	// listed by the pinned clients, in every deleted namespace, and the
	// owner of the garbage collector's pairs.
	Owned NewType
	// Cluster is a cluster-scoped type only To serves: listed and watched
	// (zero: To serves none, as 1.38 with its gang scheduling beta).
	Cluster schema.GroupVersionResource
	// DefaultAPIs: both versions run with their defaults (lab.Spec);
	// otherwise To serves Owned through Config.
	DefaultAPIs bool
	// Config is how To serves Owned, as the report says it.
	Config string
	// OwnerLifetime is what the cluster itself does to an Owned object,
	// as the report says it ("" nothing).
	OwnerLifetime string
}

// NewType is a resource type only a pair's To serves, and how the drill
// makes one.
type NewType struct {
	GVR  schema.GroupVersionResource
	Kind string
	// Object returns a valid object named name (checked against a real
	// server of To); nothing in the plane rejects it, nor deletes it but
	// as OwnerLifetime says.
	Object func(name string) (*unstructured.Unstructured, error)
}

// Pairs are the upgrades the drill runs. The types were found by
// diffing the versions' discovery (proxy/discovery/testdata); nothing is
// served only by From with these configurations.
var Pairs = []Pair{
	{
		From: lab.OldVersion, To: lab.NewVersion,
		Owned: NewType{GVR: schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"},
			Kind: "Workload", Object: workload},
		Cluster: schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"},
		Config:  "the `scheduling.k8s.io/v1alpha2` runtime-config and the `GenericWorkload` gate",
	},
	{
		// v1.37.2 serves four types by default that v1.36.3 does not
		// (storageversionmigrations, podcertificaterequests,
		// clustertrustbundles, devicetaintrules); podcertificaterequests
		// is the one namespaced. Its validation asks only for a
		// well-formed request (no pod is looked up), and the
		// controller-manager deletes a request after 15 minutes.
		From: lab.NewVersion, To: "v1.37.2",
		Owned: NewType{GVR: schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "podcertificaterequests"},
			Kind: "PodCertificateRequest", Object: podCertificateRequest},
		Cluster:     schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "devicetaintrules"},
		DefaultAPIs: true,
		Config:      "its defaults",
		OwnerLifetime: " The controller-manager deletes a PodCertificateRequest 15 minutes after its creation (no signer answers the drill's), " +
			"and the garbage collector then, rightly, its ConfigMap: a pair whose owner is gone is not counted.",
	},
	{
		// v1.38.0-beta.0 serves by default exactly what v1.37.2 does
		// (their aggregated discovery is byte-identical: the
		// podcertificaterequests drill has nothing to count). What 1.38
		// adds is gang scheduling's beta, scheduling.k8s.io/v1beta1
		// with CompositePodGroup, which a user adopting it switches on
		// (lab.newAPIs): workloads, podgroups and compositepodgroups,
		// all namespaced. A Workload carries no finalizer (a
		// CompositePodGroup does: its controller removes it), so
		// namespaces the drill deletes end as the namespace controller
		// ends them.
		From: "v1.37.2", To: "v1.38.0-beta.0",
		Owned: NewType{GVR: schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1beta1", Resource: "workloads"},
			Kind: "Workload", Object: workloadV1beta1},
		Config: "the `scheduling.k8s.io/v1beta1` runtime-config and the `GenericWorkload`, `TopologyAwareWorkloadScheduling` and " +
			"`CompositePodGroup` gates (gang scheduling's beta in 1.38; by default v1.38.0-beta.0 serves exactly what v1.37.2 does)",
	},
}

// PairOf returns the pair from → to.
func PairOf(from, to string) (Pair, error) {
	for _, p := range Pairs {
		if p.From == from && p.To == to {
			return p, nil
		}
	}
	known := make([]string, len(Pairs))
	for i, p := range Pairs {
		known[i] = p.String()
	}
	return Pair{}, fmt.Errorf("no drill for %s → %s (known: %v)", from, to, known)
}

func (p Pair) String() string { return p.From + " → " + p.To }

// Docs are where the pair's report and its images go by default: the
// default pair's in docs/upgrade-drill.md and docs/drill, another's named
// after its To (docs/upgrade-drill-1.37.md, docs/drill/1.37).
func (p Pair) Docs() (report, images string) {
	if p.From == lab.OldVersion && p.To == lab.NewVersion {
		return filepath.Join("docs", "upgrade-drill.md"), filepath.Join("docs", "drill")
	}
	minor := strings.TrimPrefix(semver.MajorMinor(p.To), "v")
	return filepath.Join("docs", "upgrade-drill-"+minor+".md"), filepath.Join("docs", "drill", minor)
}

// types are the pair's new types.
func (p Pair) types() []schema.GroupVersionResource {
	if p.Cluster.Empty() {
		return []schema.GroupVersionResource{p.Owned.GVR}
	}
	return []schema.GroupVersionResource{p.Owned.GVR, p.Cluster}
}

func workload(name string) (*unstructured.Unstructured, error) {
	return workloadOf("scheduling.k8s.io/v1alpha2", name), nil
}

func workloadV1beta1(name string) (*unstructured.Unstructured, error) {
	return workloadOf("scheduling.k8s.io/v1beta1", name), nil
}

// workloadOf is a Workload of one pod group with the basic policy, whose
// shape v1alpha2 (1.36) and v1beta1 (1.38) share.
func workloadOf(apiVersion, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": "Workload",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"podGroupTemplates": []any{map[string]any{"name": "workers", "schedulingPolicy": map[string]any{"basic": map[string]any{}}}}}}}
}

// pcrSpec is the spec of every PodCertificateRequest the drill makes:
// v1 carries the key in a stub PKCS#10 request (contents unchecked, its
// signature checked), the key from a fixed seed (it guards nothing).
var pcrSpec = sync.OnceValues(func() (map[string]any, error) {
	seed := sha256.Sum256([]byte("skewgate upgrade drill"))
	csr, err := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{}, ed25519.NewKeyFromSeed(seed[:]))
	if err != nil {
		return nil, fmt.Errorf("stub PKCS#10 request: %w", err)
	}
	return map[string]any{
		// A signer nobody runs: the request stays pending.
		"signerName": "drill.skewgate.io/none", "maxExpirationSeconds": int64(86400),
		"podName": "drill", "podUID": "00000000-0000-0000-0000-00000000d711",
		"serviceAccountName": "default", "serviceAccountUID": "00000000-0000-0000-0000-00000000d712",
		"nodeName": "node-a", "nodeUID": "00000000-0000-0000-0000-00000000d713",
		"stubPKCS10Request": base64.StdEncoding.EncodeToString(csr),
	}, nil
})

func podCertificateRequest(name string) (*unstructured.Unstructured, error) {
	spec, err := pcrSpec()
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "certificates.k8s.io/v1", "kind": "PodCertificateRequest",
		"metadata": map[string]any{"name": name}, "spec": runtime.DeepCopyJSON(spec)}}, nil
}

package discovery

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

// recordedFixture is one server's recorded /api and /apis, as the server sent
// them, in one aggregated format.
type recordedFixture struct {
	version string // the kube-apiserver's version
	suffix  string // testdata/<version>-{api,apis}-<suffix>.json
	format  Format
}

// recordedFixtures are the versions skewgate supports, with what each sends
// to skewgate's Accept. v2beta1: no supported server sends it (1.35 locks the
// AggregatedDiscoveryRemoveBetaType gate on and answers it 404), but skewgate
// still asks older servers for it; that fixture is v1.35.4's /api and /apis
// encoded as v2beta1 by the apiserver library's own scheme and conversion
// (k8s.io/apiserver v0.37.2), which is what a 1.32 server's handler sends.
var recordedFixtures = []recordedFixture{
	{"v1.35.4", "v2", FormatV2},
	{"v1.36.3", "v2", FormatV2},
	{"v1.35.4", "as-v2beta1", FormatV2Beta1},
	{"v1.37.2", "v2", FormatV2},
}

// serveRecorded answers /api and /apis with f's recorded bodies and the
// Content-Type of f's format, whatever was asked for.
func serveRecorded(t *testing.T, f recordedFixture) *httptest.Server {
	t.Helper()
	bodies := map[string][]byte{}
	for _, ep := range []string{"api", "apis"} {
		data, err := os.ReadFile(filepath.Join("testdata", f.version+"-"+ep+"-"+f.suffix+".json"))
		if err != nil {
			t.Fatal(err)
		}
		bodies["/"+ep] = data
	}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := bodies[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v="+string(f.format)+";as=APIGroupDiscoveryList")
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

// Every supported server's recorded discovery decodes through the fetcher,
// lists what that version serves, and v2beta1 decodes to exactly what v2 of
// the same server does: nothing depends on the v2beta1 Go types, which
// k8s.io/api v0.38 removes.
func TestFetchRecordedFixtures(t *testing.T) {
	docs := map[recordedFixture]*Doc{}
	for _, f := range recordedFixtures {
		t.Run(f.version+"-"+f.suffix, func(t *testing.T) {
			doc, err := fetcher(serveRecorded(t, f)).Fetch(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			docs[f] = doc
			if doc.API.Format != f.format || doc.APIs.Format != f.format {
				t.Errorf("format %q/%q, want %q", doc.API.Format, doc.APIs.Format, f.format)
			}
			names := namesOf(doc.Groups())
			for _, want := range []string{"/v1/pods", "/v1/configmaps", "apps/v1/deployments", "coordination.k8s.io/v1/leases", "rbac.authorization.k8s.io/v1/roles"} {
				if !slices.Contains(names, want) {
					t.Errorf("%s not listed", want)
				}
			}
			// The lab's skew: only 1.36 serves scheduling.k8s.io/v1alpha2.
			want136 := f.version == "v1.36.3"
			if got := slices.Contains(names, "scheduling.k8s.io/v1alpha2/workloads"); got != want136 {
				t.Errorf("scheduling.k8s.io/v1alpha2/workloads listed: %v, want %v", got, want136)
			}
			// 1.37's new types, served by default.
			want137 := f.version == "v1.37.2"
			for _, gvr := range []string{"storagemigration.k8s.io/v1/storageversionmigrations", "certificates.k8s.io/v1/podcertificaterequests",
				"certificates.k8s.io/v1/clustertrustbundles", "resource.k8s.io/v1/devicetaintrules"} {
				if got := slices.Contains(names, gvr); got != want137 {
					t.Errorf("%s listed: %v, want %v", gvr, got, want137)
				}
			}
			for _, g := range doc.Groups() {
				if g.APIVersion != "" && g.APIVersion != apidiscoveryv2.SchemeGroupVersion.String() {
					t.Errorf("group %q keeps apiVersion %q", g.Name, g.APIVersion)
				}
			}
		})
	}
	v2, beta := docs[recordedFixtures[0]], docs[recordedFixtures[2]]
	if v2 == nil || beta == nil {
		t.Fatal("a v1.35.4 fixture did not decode")
	}
	if !reflect.DeepEqual(v2.Groups(), beta.Groups()) {
		t.Errorf("v2beta1 decodes to other content than v2 of the same server")
	}
	if caps := NewCapabilities(beta); !reflect.DeepEqual(caps, NewCapabilities(v2)) {
		t.Errorf("v2beta1 capabilities differ from v2's")
	}
}

// A body must be the version its Content-Type claims: a v2beta1 body is not
// taken for v2 nor the other way round, though the two decode alike.
func TestDecodeAggregatedChecksVersion(t *testing.T) {
	for _, tc := range []struct {
		file   string
		format Format
		ok     bool
	}{
		{"v1.35.4-apis-v2.json", FormatV2, true},
		{"v1.35.4-apis-v2.json", FormatV2Beta1, false},
		{"v1.35.4-apis-as-v2beta1.json", FormatV2Beta1, true},
		{"v1.35.4-apis-as-v2beta1.json", FormatV2, false},
		{"status-406.json", FormatV2, false},
		{"status-406.json", FormatV2Beta1, false},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		items, err := decodeAggregated(tc.format, data)
		if (err == nil) != tc.ok {
			t.Errorf("%s as %s: error %v, want ok=%v", tc.file, tc.format, err, tc.ok)
		}
		if tc.ok && len(items) < 10 {
			t.Errorf("%s as %s: %d groups", tc.file, tc.format, len(items))
		}
	}
}

// TestDecode: the exported reader takes a recorded v2 answer by its
// Content-Type, refuses legacy discovery (no resources) and a document
// whose groups belong to the other endpoint.
func TestDecode(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "v1.36.3-apis-v2.json"))
	if err != nil {
		t.Fatal(err)
	}
	items, err := Decode("/apis", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", data)
	if err != nil || len(items) != 20 {
		t.Fatalf("Decode v2 = %d groups, %v; want 20", len(items), err)
	}
	if _, err := Decode("/apis", "application/json", data); !errors.Is(err, ErrNotAggregated) {
		t.Errorf("legacy content type: %v, want ErrNotAggregated", err)
	}
	if _, err := Decode("/api", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", data); err == nil {
		t.Error("named groups accepted as /api")
	}
}

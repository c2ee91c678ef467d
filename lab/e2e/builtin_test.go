package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/membership"
	"github.com/skewgate/skewgate/proxy/plan"
	"github.com/skewgate/skewgate/proxy/route"
)

// TestBuiltInFromTheCluster: node-a's skewgate reads the built-in groups
// from the real servers' APIServices (onstart-managed, so neither a CRD's
// nor an aggregated API's) and records what each version served; what
// v1.36.3 serves and v1.35.4 does not is exactly the four types the
// compiled tables of earlier builds listed — from the servers, not from
// skewgate.
func TestBuiltInFromTheCluster(t *testing.T) {
	var v admin.RoutesView
	waitFor(t, 30*time.Second, "built-in groups from the APIServices and both releases recorded", func() bool {
		r := do(t, http.DefaultClient, http.MethodGet, lab.SkewgateAdminURL(node(t, "node-a"))+"/debug/routes", nil)
		v = admin.RoutesView{}
		if err := json.Unmarshal(r.Body, &v); err != nil {
			t.Fatalf("/debug/routes: %v", err)
		}
		return v.BuiltIn != nil && v.BuiltIn.Source == membership.BuiltInFromAPIServices && len(v.Releases) == 2
	})
	for _, g := range []string{"", "apps", "scheduling.k8s.io", "apiextensions.k8s.io"} {
		if !slices.Contains(v.BuiltIn.Groups, g) {
			t.Errorf("built-in groups %v lack %q", v.BuiltIn.Groups, g)
		}
	}
	// The aggregator's own group has no onstart APIService (seen here):
	// routing counts it always.
	if !route.BuiltInGroups(nil).BuiltIn("apiregistration.k8s.io") {
		t.Error("apiregistration.k8s.io is not built in")
	}
	oldR, err := plan.TargetOf(lab.OldVersion, v.Releases)
	if err != nil {
		t.Fatal(err)
	}
	if v.Releases[0].Version != lab.OldVersion || v.Releases[1].Version != lab.NewVersion {
		t.Fatalf("releases %s, %s; want %s, %s", v.Releases[0].Version, v.Releases[1].Version, lab.OldVersion, lab.NewVersion)
	}
	var added []string
	for _, typ := range v.Releases[1].Types {
		if !slices.Contains(v.Releases[0].Types, typ) {
			added = append(added, typ)
		}
	}
	want := []string{
		"admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
		"admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
		"scheduling.k8s.io/v1alpha2/podgroups",
		"scheduling.k8s.io/v1alpha2/workloads",
	}
	if !slices.Equal(added, want) {
		t.Errorf("%s adds %v over %s; want %v", lab.NewVersion, added, lab.OldVersion, want)
	}
	t.Logf("built-in groups from the APIServices: %q", v.BuiltIn.Groups)
	t.Logf("%s: %d built-in types (%s); %s adds %v", lab.OldVersion, len(v.Releases[0].Types), oldR.Recording, lab.NewVersion, added)
}

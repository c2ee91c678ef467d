package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/membership"
)

// `skewgate routes` says which types the rollback grace holds, until
// when (and until when discovery lists it), and what the cluster's
// override is; and where the built-in groups come from, with the releases
// recorded.
func TestRoutesShowsGrace(t *testing.T) {
	until := time.Now().Add(3 * time.Minute).UTC().Truncate(time.Second)
	override := until.Add(time.Hour)
	v := admin.RoutesView{
		Grace: []membership.GraceType{{GVR: schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"},
			Until: until, Listed: until.Add(-membership.DiscoverySettle), Servers: []string{"198.18.0.1:6443"}, Why: []string{"came back serving less"}}},
		GraceOverride: &override,
	}
	var out bytes.Buffer
	PrintRoutes(&out, v, false)
	for _, want := range []string{
		"rollback-grace-until): " + override.Format(time.RFC3339),
		"scheduling.k8s.io/v1alpha2/workloads",
		until.Format(time.RFC3339),
		until.Add(-membership.DiscoverySettle).Format(time.RFC3339),
		"IN DISCOVERY UNTIL",
		"198.18.0.1:6443 (came back serving less)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("routes output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	read := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	PrintRoutes(&out, admin.RoutesView{BuiltIn: &membership.BuiltInView{Source: membership.BuiltInFromAPIServices, Groups: []string{"", "apps"}},
		Releases: []membership.Release{{Version: "v1.37.2", Server: "198.18.0.2:6443", Read: read, Types: []string{"v1/pods", "apps/v1/deployments"}}}}, false)
	for _, want := range []string{"built-in groups: 2 from apiservices", "release v1.37.2: 2 built-in types, read from 198.18.0.2:6443 at 2026-12-01T00:00:00Z"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("routes output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	PrintRoutes(&out, admin.RoutesView{}, false)
	if !strings.Contains(out.String(), "no type in rollback grace") {
		t.Errorf("without a grace:\n%s", out.String())
	}
}

package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/proxy/membership"
)

// The health endpoints read like kube-apiserver's: named checks, verbose
// output, one check at a time.
func TestHealthEndpoints(t *testing.T) {
	m, err := membership.New(membership.Config{Local: &url.URL{Scheme: "https", Host: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		profiling bool
		path      string
		code      int
		body      string
	}{
		{false, "/healthz", 200, "ok"},
		{false, "/livez", 200, "ok"},
		{false, "/readyz/ping", 200, "ok"},
		{false, "/readyz", 500, "readyz check failed"},
		{false, "/readyz?verbose", 500, "[+]ping ok\n[-]discovery failed"},
		{false, "/readyz/discovery", 500, "local discovery (127.0.0.1:1) not read yet"},
		{false, "/readyz?exclude=discovery", 200, "ok"},
		{false, "/debug/pprof/", 404, ""},
		{true, "/debug/pprof/", 200, "goroutine"},
	} {
		h := Handler(m, prometheus.NewRegistry(), Options{Profiling: tc.profiling})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != tc.code || !strings.Contains(string(body), tc.body) {
			t.Errorf("GET %s (profiling %t): %d %q, want %d containing %q", tc.path, tc.profiling, rec.Code, body, tc.code, tc.body)
		}
	}
}

// /debug/explain says whether steering brings such a request to skewgate
// at all, beside how skewgate would route it.
func TestExplainShowsSteering(t *testing.T) {
	m, err := membership.New(membership.Config{Local: &url.URL{Scheme: "https", Host: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	steering := &SteeringView{Layout: SteeringLayout, State: "standby", Mode: "auto"}
	for _, tc := range []struct {
		steering func() *SteeringView
		want     string
		not      string
	}{
		{func() *SteeringView { return steering }, `"steering": {`, ""},
		{nil, `"route"`, `"steering"`},
	} {
		h := Handler(m, prometheus.NewRegistry(), Options{Steering: tc.steering})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/explain?verb=get&path=/api/v1/pods", nil))
		body := rec.Body.String()
		if rec.Code != http.StatusOK || !strings.Contains(body, tc.want) || tc.not != "" && strings.Contains(body, tc.not) {
			t.Errorf("explain with steering %v: %d %s, want %q and not %q", tc.steering != nil, rec.Code, body, tc.want, tc.not)
		}
		if tc.steering != nil && !strings.Contains(body, `"mode": "auto"`) {
			t.Errorf("explain does not show the steering state: %s", body)
		}
	}
}

// /debug/routes says which skewgate answers, the skew window and where
// the built-in groups come from as fields, for kubectl skewgate.
func TestRoutesShowVersionAndWindow(t *testing.T) {
	m, err := membership.New(membership.Config{Local: &url.URL{Scheme: "https", Host: "127.0.0.1:1"},
		UpgradeSignal: func() (bool, string) { return true, "node-a's manifest names v1.36.3" }})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	Handler(m, prometheus.NewRegistry(), Options{Version: "v9.9.9"}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/routes", nil))
	var v RoutesView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Version != "v9.9.9" || v.Window == nil || !v.Window.Open || !strings.Contains(v.Window.Reason, "v1.36.3") || v.Window.Until != nil {
		t.Errorf("/debug/routes: version %q, window %+v; want v9.9.9 and open while the upgrade signal lasts\n%s", v.Version, v.Window, rec.Body.String())
	}
	// No cluster read: the compiled groups decide, and it says so.
	if v.BuiltIn == nil || v.BuiltIn.Source != membership.BuiltInCompiled || v.Releases != nil {
		t.Errorf("/debug/routes: builtIn %+v, releases %v; want compiled and none", v.BuiltIn, v.Releases)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/lab"
)

// TestMain lets a test run this binary as skewgate itself (SKEWGATE_EXEC=1):
// logging flags apply once per process, so each command line gets its own.
func TestMain(m *testing.M) {
	if os.Getenv("SKEWGATE_EXEC") == "1" {
		os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// skewgate runs a command line in a child process and returns its exit
// status, stdout and stderr.
func skewgate(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SKEWGATE_EXEC=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := skewgate(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		for _, want := range []string{"skewgate v", "commit:", "go:         go1.", "build date:"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v printed %q, missing %q", args, out, want)
			}
		}
	}
}

// A typo in the kill switch must fail loudly: scripts run it during an
// incident and trust its exit status.
func TestUsageErrorsExitTwo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"steer", "of"}, `unknown command "of" for "skewgate steer"; did you mean "off"?`},
		{[]string{"steer"}, "needs a subcommand: off, on, status"},
		{[]string{"stear", "off"}, `unknown command "stear" for "skewgate"`},
		{[]string{"steer", "off", "now"}, "unknown command"},
		{[]string{"steer", "off", "--pin-pth=/x"}, "unknown flag: --pin-pth"},
		{[]string{"explain", "get"}, "accepts 2 arg(s)"},
		{[]string{"run", "--secure-port=x"}, "invalid argument"},
		{[]string{}, "needs a subcommand"},
	} {
		code, out, errOut := skewgate(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("skewgate %v: exit %d, stderr %q, stdout %q; want exit 2 and %q", tc.args, code, errOut, out, tc.want)
		}
	}
}

// Every missing flag is reported in one run, not one per attempt.
func TestRunReportsEveryMissingFlagAtOnce(t *testing.T) {
	code, _, errOut := skewgate(t, "run", "--steering", "--steer-address=nonsense", "--peers=http://x", "--discovery-refresh-interval=0s")
	if code != 2 {
		t.Fatalf("exit %d, want 2: %s", code, errOut)
	}
	for _, flag := range []string{"--tls-cert-file", "--tls-private-key-file", "--client-ca-file", "--proxy-client-cert-file",
		"--proxy-client-key-file", "--peer-ca-file", "--peers", "--discovery-refresh-interval"} {
		if !strings.Contains(errOut, flag) {
			t.Errorf("stderr does not name %s: %s", flag, errOut)
		}
	}
	code, _, errOut = skewgate(t, "run", "--local-apiserver=https://127.0.0.1:6443", "--steering", "--steer-address=nonsense", "--logging-format=yaml")
	for _, want := range []string{"--steer-address \"nonsense\"", "logging flags: format: Invalid value: \"yaml\"", "--tls-cert-file"} {
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("exit %d, stderr does not name %q: %s", code, want, errOut)
		}
	}
}

// --secure-admin-loopback needs a secure listener, and collides with the
// plain one's default (127.0.0.1:16444) on the manifests' port: both are
// refused before anything starts, not at bind time.
func TestSecureAdminLoopbackFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--secure-admin-loopback"}, "no --secure-admin-address to serve on loopback too"},
		{[]string{"--secure-admin-loopback", "--secure-admin-address=198.18.0.1:16444"}, "which --metrics-bind-address=127.0.0.1:16444 takes"},
	} {
		code, _, errOut := skewgate(t, append([]string{"run", "--apiserver-manifest="}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("run %v: exit %d, want 2 saying %q: %s", tc.args, code, tc.want, errOut)
		}
	}
	code, _, errOut := skewgate(t, "run", "--apiserver-manifest=", "--secure-admin-loopback", "--secure-admin-address=198.18.0.1:16444", "--metrics-bind-address=")
	if strings.Contains(errOut, "loopback") {
		t.Errorf("run with the plain listener off: exit %d, the loopback refused: %s", code, errOut)
	}
}

func TestRunHelpHasSections(t *testing.T) {
	code, out, _ := skewgate(t, "run", "--help")
	if code != 0 {
		t.Fatalf("run --help: exit %d", code)
	}
	var last int
	for _, section := range []string{"Serving flags:", "Authentication flags:", "Peers flags:", "Steering flags:", "Admin flags:", "Logging flags:"} {
		i := strings.Index(out, section)
		if i < last {
			t.Errorf("section %q missing or out of order in:\n%s", section, out)
		}
		last = i
	}
}

// With --logging-format=json every line skewgate writes is a JSON record,
// its own log lines included: slog, klog and the libraries share one logger.
func TestRunLogsJSON(t *testing.T) {
	dir := t.TempDir()
	pki, err := lab.GeneratePKI(dir, []lab.Node{{Name: "node-a", IP: netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	serving := pki.Serving["node-a"]
	// A local apiserver that is down is no reason to stop (skewgate serves
	// through peers meanwhile); one whose certificate the peer CA does not
	// trust is a wrong flag, and the quickest way out here.
	impostor := httptest.NewTLSServer(http.NotFoundHandler())
	defer impostor.Close()
	code, out, errOut := skewgate(t, "run", "--logging-format=json", "-v=2",
		"--tls-cert-file="+serving.CertFile, "--tls-private-key-file="+serving.KeyFile,
		"--client-ca-file="+pki.CAFile, "--proxy-client-cert-file="+pki.FrontProxyClient.CertFile,
		"--proxy-client-key-file="+pki.FrontProxyClient.KeyFile, "--peer-ca-file="+pki.CAFile,
		"--local-apiserver="+impostor.URL, "--peers=https://127.0.0.1:2,https://198.51.100.7:6443",
		"--state-file="+filepath.Join(dir, "state.json"))
	if code != 1 || !strings.Contains(errOut, "apiserver certificate not trusted") {
		t.Fatalf("exit %d, want 1 and the untrusted local apiserver: %s", code, errOut)
	}
	var records int
	var sawPeers bool
	for _, line := range strings.Split(strings.TrimSpace(out+errOut), "\n") {
		if strings.HasPrefix(line, "skewgate: ") { // the final error, not a log record
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON record: %q", line)
			continue
		}
		records++
		if rec["msg"] == "--peers names this node: left out" && rec["peer"] == "https://127.0.0.1:2" {
			sawPeers = true
		}
	}
	if records == 0 || !sawPeers {
		t.Errorf("%d JSON records, the --peers line seen: %t\nstdout: %s\nstderr: %s", records, sawPeers, out, errOut)
	}
}

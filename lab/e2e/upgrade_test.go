package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/lab"
)

// TestUpgradeSplicedThrough opens a real protocol upgrade through skewgate:
// node-a's apiserver proxies pods/proxy to an echo server on the lab
// bridge, so the 101 and the bytes after it cross skewgate, the apiserver
// and back. The answer carries skewgate's route headers, the caller's
// identity decides (the user gets the apiserver's 403 even with forged
// X-Remote-*), and the metrics count each by its real code.
func TestUpgradeSplicedThrough(t *testing.T) {
	ln, err := net.Listen("tcp", net.JoinHostPort(lab.BridgeAddr.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	upgrades := make(chan http.Header, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upgrades <- r.Header.Clone()
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: skewgate-echo\r\n\r\n")
		rw.Flush()
		io.Copy(conn, rw)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	// A pod with no kubelet whose IP is the echo server's: pods/proxy
	// dials it.
	admin, a := client(t, plane.PKI.Admin), node(t, "node-a").URL()
	ns := a + "/api/v1/namespaces/default"
	if r := do(t, admin, http.MethodPost, ns+"/serviceaccounts", []byte(`{"metadata":{"name":"default"}}`)); r.Code != http.StatusCreated && r.Code != http.StatusConflict {
		t.Fatalf("create the default service account: %d %s", r.Code, trim(r.Body))
	}
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"sg-echo"},"spec":{"nodeName":"sg-no-kubelet","automountServiceAccountToken":false,"containers":[{"name":"echo","image":"none"}]}}`
	if r := do(t, admin, http.MethodPost, ns+"/pods", []byte(pod)); r.Code != http.StatusCreated {
		t.Fatalf("create pod: %d %s", r.Code, trim(r.Body))
	}
	t.Cleanup(func() { do(t, admin, http.MethodDelete, ns+"/pods/sg-echo?gracePeriodSeconds=0", nil) })
	status := fmt.Sprintf(`{"status":{"podIP":%q,"podIPs":[{"ip":%q}]}}`, lab.BridgeAddr, lab.BridgeAddr)
	if r := do(t, admin, http.MethodPatch, ns+"/pods/sg-echo/status", []byte(status), "Content-Type", "application/merge-patch+json"); r.Code != http.StatusOK {
		t.Fatalf("set the pod's IP: %d %s", r.Code, trim(r.Body))
	}

	url := fmt.Sprintf("%s/api/v1/namespaces/default/pods/sg-echo:%d/proxy/", via(t), port)
	resp := upgrade(t, admin, url)
	var failed []byte
	if resp.StatusCode != http.StatusSwitchingProtocols {
		failed, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	routed(t, "admin upgrade", response{Code: resp.StatusCode, Header: resp.Header, Body: failed}, http.StatusSwitchingProtocols, "local", "127.0.0.1:6443")
	if resp.StatusCode == http.StatusSwitchingProtocols {
		stream := resp.Body.(io.ReadWriteCloser)
		fmt.Fprintf(stream, "ping through skewgate\n")
		line, err := bufio.NewReader(stream).ReadString('\n')
		stream.Close()
		if err != nil || line != "ping through skewgate\n" {
			t.Errorf("echo over the upgraded stream = %q, %v", line, err)
		}
	}
	select {
	case <-upgrades:
	case <-time.After(5 * time.Second):
		t.Error("the echo server saw no upgrade request")
	}

	resp = upgrade(t, client(t, plane.PKI.User), url, "X-Remote-User", "lab-admin", "X-Remote-Group", "system:masters")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	routed(t, "user upgrade with forged identity", response{Code: resp.StatusCode, Header: resp.Header, Body: body}, http.StatusForbidden, "local", "127.0.0.1:6443")
	if !strings.Contains(string(body), `User \"lab-user\"`) {
		t.Errorf("403 not for lab-user: %s", trim(body))
	}
	select {
	case <-upgrades:
		t.Error("a forbidden upgrade reached the echo server")
	default:
	}

	// An upgrade is counted when its handler returns, which may be a
	// moment after the client read the answer off the hijacked connection.
	for _, code := range []string{"101", "403"} {
		want := fmt.Sprintf(`skewgate_requests_total{code=%q,group="",resource="pods",route="local",rule="3",verb="get",version="v1"}`, code)
		waitFor(t, 5*time.Second, "metrics with "+want, func() bool {
			return strings.Contains(string(do(t, http.DefaultClient, http.MethodGet, lab.SkewgateAdminURL(node(t, "node-a"))+"/metrics", nil).Body), want)
		})
	}
}

// upgrade sends an upgrade request and returns the response; on a 101 its
// Body is the spliced stream.
func upgrade(t *testing.T, c *http.Client, url string, hdr ...string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "skewgate-echo")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	// The context bounds the exchange; a client timeout would wrap the
	// body and hide the spliced stream's Write.
	noTimeout := *c
	noTimeout.Timeout = 0
	resp, err := noTimeout.Do(req)
	if err != nil {
		t.Fatalf("upgrade %s: %v", url, err)
	}
	return resp
}

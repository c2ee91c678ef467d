package drain

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestStopAnswersAcceptedConnections: plain HTTP, as the admin listener
// serves — a connection accepted before Stop, whose request comes after
// Stop began, is answered (and told to close); nothing new is accepted.
func TestStopAnswersAcceptedConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Track(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })})
	go srv.Serve(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for srv.pending() == 0 { // accepted
		time.Sleep(time.Millisecond)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Stop(context.Background(), ln) }()
	time.Sleep(200 * time.Millisecond)
	io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("accepted before Stop, asked after: no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "ok" || !resp.Close {
		t.Errorf("answer %d %q close=%t, want 200 ok and the connection closed", resp.StatusCode, body, resp.Close)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop: %v", err)
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Errorf("still accepting after Stop")
	}
}

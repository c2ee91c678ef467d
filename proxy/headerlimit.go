package proxy

import (
	"net/http"
)

// kube-apiserver takes a request line and header block of 1 MiB over
// HTTP/1.1 (its http.Server MaxHeaderBytes) and, over HTTP/2, a header
// list of that plus 320 bytes (Go pads its SETTINGS_MAX_HEADER_LIST_SIZE
// for ten fields' overhead), each field counted as its name, its value and
// 32 bytes. skewgate reaches it over HTTP/2, and Go's client refuses to
// send a larger list. A caller's request must therefore fit, with what
// skewgate adds, or be refused at the front — never reach the transport,
// whose refusal would look like the server's failure.
const apiserverHeaderList = 1<<20 + 10*32

// addedHeaders bounds the fields skewgate or its transport add besides the
// identity: :authority and :scheme of the apiserver, the peer mark, its
// address appended to X-Forwarded-For, Accept-Encoding, a default
// User-Agent and Content-Length. Each under 128 bytes counted as HTTP/2
// does.
const addedHeaders = 1 << 10

// FrontHeaderBytes is the listener's http.Server MaxHeaderBytes: over
// HTTP/1.1 the request line and header block it reads, over HTTP/2 (plus
// 320) the header list it advertises and takes. It leaves room under the
// apiserver's limit for what skewgate adds and an ordinary identity, so Go's
// server refuses oversized requests itself (431) before skewgate reads
// them; headerListFits catches what this cannot (many small fields over
// HTTP/1.1, which HTTP/2 counts 32 bytes more each; a huge identity).
const FrontHeaderBytes = 1<<20 - 16<<10

// headerListFits reports whether r, sent on with the identity headers
// identity and what skewgate adds, stays within what kube-apiserver takes,
// counted as Go's HTTP/2 client counts it (conservatively: hop-by-hop
// fields it would drop count too).
func headerListFits(r *http.Request, identity http.Header) bool {
	uri := r.RequestURI
	if uri == "" {
		uri = r.URL.RequestURI()
	}
	size := len(":method") + len(r.Method) + 32 + len(":path") + len(uri) + 32
	size += fieldsSize(r.Header) + fieldsSize(r.Trailer) + fieldsSize(identity)
	return size+addedHeaders <= apiserverHeaderList
}

func fieldsSize(h http.Header) int {
	n := 0
	for k, vv := range h {
		for _, v := range vv {
			n += len(k) + len(v) + 32
		}
	}
	return n
}

// identityHeaders are the identity headers skewgate will set for c.
func (a *callerAuth) identityHeaders(c Caller) http.Header {
	if c.identity != nil || c.User == nil {
		return c.identity
	}
	h := http.Header{}
	a.rh.Names.set(h, c.User)
	return h
}

//go:build go1.27

package headercount

import "net/http"

// Set gives s kube-apiserver's header value limit, Max.
func Set(s *http.Server) { s.MaxHeaderValueCount = Max }

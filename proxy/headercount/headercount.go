// Package headercount sets how many request header values skewgate's
// servers take, as kube-apiserver sets it.
//
// Go 1.27's net/http refuses a request with more than 500 header values
// (http.DefaultMaxHeaderValueCount) with 431, over HTTP/1.1 and HTTP/2
// alike (x/net's http2.ConfigureServer wraps net/http's server from Go
// 1.27 on). A caller in many groups sends one header line per group
// (Impersonate-Group, X-Remote-Group), so kube-apiserver raises the limit
// to 16384 on every server it runs (k8s.io/apiserver pkg/server,
// header_value_count_go127.go): skewgate in front of it must take what
// it takes. Go before 1.27 has neither the limit nor the field, so the
// setting is compiled only from 1.27 on (build tags, as k8s.io/apiserver
// does): the same source builds on both.
package headercount

// Max is kube-apiserver's limit: 1 MiB of header bytes at about 64 bytes a
// value, so it still bounds floods of tiny headers.
const Max = 16384

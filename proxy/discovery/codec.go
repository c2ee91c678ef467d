package discovery

import (
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// codecScheme knows aggregated discovery v2 and the unversioned meta types of
// legacy discovery and of Status errors. Not v2beta1: skewgate never serves
// it (1.35+ servers answer it 404, the merged view 406), and its Go
// types and conversions are gone from k8s.io v0.38; decodeAggregated reads
// it into the v2 types.
var codecScheme = newCodecScheme()

// codecs negotiates JSON, YAML and protobuf, like the apiserver's discovery
// handlers (CBOR is behind a feature gate there and off by default).
var codecs = serializer.NewCodecFactory(codecScheme)

func newCodecScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(apidiscoveryv2.AddToScheme(s))
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
}

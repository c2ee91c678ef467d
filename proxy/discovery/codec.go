package discovery

import (
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apidiscoveryv2beta1 "k8s.io/api/apidiscovery/v2beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	apidiscoveryconversion "k8s.io/apiserver/pkg/apis/apidiscovery/v2"
)

// codecScheme knows the aggregated discovery types (v2, v2beta1 and their
// conversion, registered as kube-apiserver does) and the unversioned meta
// types of legacy discovery and of Status errors.
var codecScheme = newCodecScheme()

// codecs negotiates JSON, YAML and protobuf, like the apiserver's discovery
// handlers (CBOR is behind a feature gate there and off by default).
var codecs = serializer.NewCodecFactory(codecScheme)

func newCodecScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(apidiscoveryv2.AddToScheme(s))
	utilruntime.Must(apidiscoveryv2beta1.AddToScheme(s))
	utilruntime.Must(apidiscoveryconversion.RegisterConversions(s))
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
}

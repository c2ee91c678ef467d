package kubernetes_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// switchPolicy renders the base as kubectl apply -k would and returns its
// policy and binding.
func switchPolicy(t *testing.T) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	var binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, r := range rm.Resources() {
		var into any
		switch r.GetKind() {
		case "ValidatingAdmissionPolicy":
			policy = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			into = policy
		case "ValidatingAdmissionPolicyBinding":
			binding = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			into = binding
		default:
			continue
		}
		data, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(data, into); err != nil {
			t.Fatalf("%s: %v", r.GetKind(), err)
		}
	}
	if policy == nil || binding == nil || policy.Spec.MatchConstraints == nil {
		t.Fatal("the base lacks the switch policy, its match constraints or its binding")
	}
	defaultMatchResources(policy.Spec.MatchConstraints)
	if binding.Spec.MatchResources != nil {
		defaultMatchResources(binding.Spec.MatchResources)
	}
	return policy, binding
}

// defaultMatchResources is what kube-apiserver's defaulting of
// admissionregistration/v1 sets before a policy is stored: empty (match
// everything) selectors and matchPolicy Equivalent.
func defaultMatchResources(m *admissionregistrationv1.MatchResources) {
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	if m.MatchPolicy == nil {
		equivalent := admissionregistrationv1.Equivalent
		m.MatchPolicy = &equivalent
	}
}

// compileSwitchPolicy compiles the policy's CEL with kube-apiserver's own
// compiler and environment, as its ValidatingAdmissionPolicy plugin does
// (validating.compilePolicy: no params, no match conditions).
func compileSwitchPolicy(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	t.Helper()
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	vars := make([]plugincel.NamedExpressionAccessor, len(p.Spec.Variables))
	for i, v := range p.Spec.Variables {
		vars[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	validations := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	withAuthz := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	compiler.CompileAndStoreVariables(vars, withAuthz, environment.StoredExpressions)
	return validating.NewValidator(
		compiler.CompileCondition(validations, withAuthz, environment.StoredExpressions), nil,
		compiler.CompileCondition(nil, withAuthz, environment.StoredExpressions), // no audit annotations
		compiler.CompileCondition(messages, plugincel.OptionalVariableDeclarations{}, environment.StoredExpressions),
		p.Spec.FailurePolicy, nil)
}

// TestSwitchPolicy runs the shipped policy through kube-apiserver's own
// matching and CEL evaluation: writes of kube-system/skewgate by anyone
// outside the named groups are denied (cluster-autoscaler's ServiceAccount,
// which may create ConfigMaps in kube-system, among them), the named
// groups' are allowed with values skewgate takes and denied with any other,
// and no other ConfigMap is touched.
func TestSwitchPolicy(t *testing.T) {
	policy, binding := switchPolicy(t)
	if binding.Spec.PolicyName != policy.Name || !slices.Equal(binding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding: policy %q, actions %v; want %q, [Deny]", binding.Spec.PolicyName, binding.Spec.ValidationActions, policy.Name)
	}
	if fp := policy.Spec.FailurePolicy; fp == nil || *fp != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %v, want Fail: a policy that cannot be evaluated must not let writes through", fp)
	}
	validator := compileSwitchPolicy(t, policy)

	namespaces := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, name := range []string{"kube-system", "default"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/metadata.name": name}}}
		if err := namespaces.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	matcher := generic.NewPolicyMatcher(matching.NewMatcher(listersv1.NewNamespaceLister(namespaces), nil))
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objects := admission.NewObjectInterfacesFromScheme(scheme)
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	gvr := corev1.SchemeGroupVersion.WithResource("configmaps")

	autoscaler := &user.DefaultInfo{Name: "system:serviceaccount:kube-system:cluster-autoscaler",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	member := func(group string) user.Info {
		return &user.DefaultInfo{Name: "someone", Groups: []string{group, "system:authenticated"}}
	}
	op := member("skewgate:operators")
	for _, tc := range []struct {
		name      string
		op        admission.Operation
		namespace string
		cm        string
		who       user.Info
		denied    bool
		data      map[string]string // nil: steering off
	}{
		{"cluster-autoscaler creates the switch", admission.Create, "kube-system", "skewgate", autoscaler, true, nil},
		{"cluster-autoscaler turns it off", admission.Update, "kube-system", "skewgate", autoscaler, true, nil},
		{"cluster-autoscaler deletes it", admission.Delete, "kube-system", "skewgate", autoscaler, true, nil},
		{"a user without groups", admission.Create, "kube-system", "skewgate", &user.DefaultInfo{Name: "nobody"}, true, nil},
		{"system:masters", admission.Create, "kube-system", "skewgate", member("system:masters"), false, nil},
		{"kubeadm's admin.conf", admission.Update, "kube-system", "skewgate", member("kubeadm:cluster-admins"), false, nil},
		{"an operator", admission.Delete, "kube-system", "skewgate", member("skewgate:operators"), false, nil},
		{"cluster-autoscaler's own status ConfigMap", admission.Update, "kube-system", "cluster-autoscaler-status", autoscaler, false, nil},
		{"a ConfigMap named skewgate elsewhere", admission.Create, "default", "skewgate", autoscaler, false, nil},
		{"an operator arms it", admission.Update, "kube-system", "skewgate", op, false, map[string]string{"steering": "always"}},
		{"an operator, mode auto", admission.Create, "kube-system", "skewgate", op, false, map[string]string{"steering": "auto"}},
		{"an operator, no data", admission.Create, "kube-system", "skewgate", op, false, map[string]string{}},
		{"an operator ends the grace", admission.Update, "kube-system", "skewgate", op, false, map[string]string{"rollback-grace-until": "2026-03-01T03:04:05Z"}},
		{"an operator, the grace with an offset and a fraction", admission.Update, "kube-system", "skewgate", op, false, map[string]string{"rollback-grace-until": "2026-03-01T04:04:05.5+01:00"}},
		{"an operator removes the grace override", admission.Update, "kube-system", "skewgate", op, false, map[string]string{"steering": "off", "rollback-grace-until": ""}},
		{"an operator, a mode skewgate ignores", admission.Update, "kube-system", "skewgate", op, true, map[string]string{"steering": "Off"}},
		{"an operator, steering empty", admission.Update, "kube-system", "skewgate", op, true, map[string]string{"steering": ""}},
		{"an operator, a key skewgate does not read", admission.Update, "kube-system", "skewgate", op, true, map[string]string{"steeering": "off"}},
		{"an operator, the grace as a duration", admission.Update, "kube-system", "skewgate", op, true, map[string]string{"rollback-grace-until": "24h"}},
		{"an operator, the grace as a verb", admission.Update, "kube-system", "skewgate", op, true, map[string]string{"rollback-grace-until": "end"}},
		{"an operator, the grace on the 13th month", admission.Update, "kube-system", "skewgate", op, true, map[string]string{"rollback-grace-until": "2026-13-01T03:04:05Z"}},
		{"system:masters, a bad value", admission.Update, "kube-system", "skewgate", member("system:masters"), true, map[string]string{"steering": "on"}},
	} {
		data := tc.data
		if data == nil {
			data = map[string]string{"steering": "off"}
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: tc.cm}, Data: data}
		var obj, old runtime.Object = cm, nil
		switch tc.op {
		case admission.Update:
			old = cm.DeepCopy()
		case admission.Delete:
			obj, old = nil, cm
		}
		attr := admission.NewAttributesRecord(obj, old, gvk, tc.namespace, tc.cm, gvr, "", tc.op, nil, false, tc.who)
		matches, _, _, err := matcher.DefinitionMatches(attr, objects, validating.NewValidatingAdmissionPolicyAccessor(policy))
		if err != nil {
			t.Fatalf("%s: match: %v", tc.name, err)
		}
		if matches {
			if matches, err = matcher.BindingMatches(attr, objects, validating.NewValidatingAdmissionPolicyBindingAccessor(binding)); err != nil {
				t.Fatalf("%s: binding match: %v", tc.name, err)
			}
		}
		var denials []string
		if matches {
			versioned, err := admission.NewVersionedAttributes(attr, gvk, objects)
			if err != nil {
				t.Fatal(err)
			}
			ns, _ := listersv1.NewNamespaceLister(namespaces).Get(tc.namespace)
			result := validator.Validate(context.Background(), gvr, versioned, nil, ns, celconfig.RuntimeCELCostBudget, nil)
			for _, d := range result.Decisions {
				if d.Action == validating.ActionDeny {
					denials = append(denials, d.Message)
				}
			}
		}
		if denied := len(denials) > 0; denied != tc.denied {
			t.Errorf("%s: matched %v, denied %v %q; want denied %v", tc.name, matches, denied, denials, tc.denied)
		}
		for _, msg := range denials {
			writer := tc.who.GetName() == "someone" // member(…)
			if !writer && (!strings.Contains(msg, "skewgate:operators") || !strings.Contains(msg, "only members of")) {
				t.Errorf("%s: the denial does not name who may write the switch: %q", tc.name, msg)
			}
			if writer && !strings.HasPrefix(msg, "kube-system/skewgate: ") {
				t.Errorf("%s: the denial does not say what skewgate takes: %q", tc.name, msg)
			}
		}
	}
}

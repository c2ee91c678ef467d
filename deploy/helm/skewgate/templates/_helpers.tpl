{{/*
Labels of every object: the kustomize base's (app.kubernetes.io/name on
each object, app.kubernetes.io/part-of from its labels:), plus
commonLabels. No helm.sh/chart or managed-by labels: the default render
is the base's objects, field for field.
*/}}
{{- define "skewgate.labels" -}}
app.kubernetes.io/name: skewgate
app.kubernetes.io/part-of: skewgate
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The image: repository (required), tagged with the chart's appVersion
unless image.tag says, and pinned by image.digest when set.
*/}}
{{- define "skewgate.image" -}}
{{ required "image.repository is required: ghcr.io/skewgate/skewgate, where releases are published (docs/release.md), or the registry you pushed make image's archive to" .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- with .Values.image.digest }}@{{ . }}{{ end }}
{{- end -}}

{{/*
Who skewgate is toward the apiserver: its ServiceAccount, or the kubeadm
user of kubeconfig.enabled.
*/}}
{{- define "skewgate.subject" -}}
{{- if .Values.kubeconfig.enabled -}}
- kind: User
  name: {{ .Values.kubeconfig.user }}
  apiGroup: rbac.authorization.k8s.io
{{- else -}}
- kind: ServiceAccount
  name: skewgate
  namespace: kube-system
{{- end -}}
{{- end -}}

{{/*
kubeadm's pki files skewgate reads, by volume name: each its own hostPath
File, never the directory.
*/}}
{{- define "skewgate.pkiFiles" -}}
apiserver-crt: apiserver.crt
apiserver-key: apiserver.key
ca-crt: ca.crt
front-proxy-ca-crt: front-proxy-ca.crt
front-proxy-client-crt: front-proxy-client.crt
front-proxy-client-key: front-proxy-client.key
{{- end -}}

{{/* Names. The Service (and the certificate's DNS names) use the full name. */}}
{{- define "dynmig.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "dynmig.labels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "dynmig.selector" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* An image reference: repository:tag, or repository@digest when a digest pins it. */}}
{{- define "dynmig.imageRef" -}}
{{- if .digest -}}
{{ .repository }}@{{ .digest }}
{{- else -}}
{{ .repository }}:{{ .tag }}
{{- end -}}
{{- end -}}

{{- define "dynmig.image" -}}
{{ include "dynmig.imageRef" (dict "repository" .Values.image.repository "tag" (.Values.image.tag | default .Chart.AppVersion) "digest" .Values.image.digest) }}
{{- end -}}

{{/* kube-scheduler tag: the value, else the cluster's vX.Y.Z (dropping suffixes like -eks-1234). */}}
{{- define "dynmig.kubeSchedulerImage" -}}
{{- $tag := .Values.kubeScheduler.image.tag -}}
{{- if not $tag -}}
{{- $v := regexFind `^v?[0-9]+\.[0-9]+(\.[0-9]+)?` .Capabilities.KubeVersion.Version | trimPrefix "v" -}}
{{- if eq (len (splitList "." $v)) 2 }}{{ $v = printf "%s.0" $v }}{{ end -}}
{{- $tag = printf "v%s" $v -}}
{{- end -}}
{{ include "dynmig.imageRef" (dict "repository" .Values.kubeScheduler.image.repository "tag" $tag "digest" .Values.kubeScheduler.image.digest) }}
{{- end -}}

{{- define "dynmig.serverSA" -}}{{ include "dynmig.fullname" . }}-scheduler{{- end -}}
{{- define "dynmig.pluginSA" -}}{{ include "dynmig.fullname" . }}-device-plugin{{- end -}}
{{- define "dynmig.draSA" -}}{{ include "dynmig.fullname" . }}-dra-plugin{{- end -}}
{{- define "dynmig.certsSA" -}}{{ include "dynmig.fullname" . }}-certs{{- end -}}
{{- define "dynmig.tlsSecret" -}}{{ include "dynmig.fullname" . }}-tls{{- end -}}
{{- define "dynmig.caSecret" -}}{{ include "dynmig.fullname" . }}-ca{{- end -}}
{{- define "dynmig.mutatingName" -}}{{ include "dynmig.fullname" . }}-mutating{{- end -}}
{{- define "dynmig.validatingName" -}}{{ include "dynmig.fullname" . }}-validating{{- end -}}
{{- define "dynmig.deviceConfigName" -}}{{ include "dynmig.fullname" . }}-device-config{{- end -}}
{{- define "dynmig.nodeConfigName" -}}{{ include "dynmig.fullname" . }}-node-config{{- end -}}
{{- define "dynmig.schedulerConfigName" -}}{{ include "dynmig.fullname" . }}-scheduler-config{{- end -}}
{{- define "dynmig.certificateName" -}}{{ include "dynmig.fullname" . }}-serving{{- end -}}

{{/* The identities allowed to write hami.io/vgpu-mig-allocations: the scheduler pod, the device
plugin, and allocationWriters (e.g. HAMi's during a handover), as a JSON list. One list for the
webhook's matchConditions, the ValidatingAdmissionPolicy and `dynmig serve --privileged-user`. */}}
{{- define "dynmig.allocationWriters" -}}
{{- $own := list (printf "system:serviceaccount:%s:%s" .Release.Namespace (include "dynmig.serverSA" .)) (printf "system:serviceaccount:%s:%s" .Release.Namespace (include "dynmig.pluginSA" .)) -}}
{{- concat $own .Values.allocationWriters | uniq | toJson -}}
{{- end -}}

{{/* The same list as a CEL list literal (values.schema.json keeps quotes and backslashes out). */}}
{{- define "dynmig.controllerUsers" -}}
[{{ range $i, $user := include "dynmig.allocationWriters" . | fromJsonArray }}{{ if $i }}, {{ end }}'{{ $user }}'{{ end }}]
{{- end -}}

{{/* The device-config file: user content, else the default file with an optional allowlist override. */}}
{{- define "dynmig.deviceConfig" -}}
{{- if .Values.deviceConfig.content -}}
{{ .Values.deviceConfig.content }}
{{- else if .Values.deviceConfig.allowlist -}}
{{- $doc := .Files.Get "files/device-config.yaml" | fromYaml -}}
{{- $_ := set $doc.nvidia "migProfileAllowlist" .Values.deviceConfig.allowlist -}}
{{ toYaml $doc }}
{{- else -}}
{{ .Files.Get "files/device-config.yaml" }}
{{- end -}}
{{- end -}}

{{- define "dynmig.vapSupported" -}}
{{- if semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version }}true{{ end -}}
{{- end -}}

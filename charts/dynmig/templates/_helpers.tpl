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

{{/* The extended-resource names dynmig reads from a pod, as the device config names them (HAMi's
keys in its `nvidia:` section, else HAMi's defaults, as `dynmig serve` reads them), a JSON object:
count, memory, memoryPercentage, cores. One place for kube-scheduler's managedResources and the
mutating webhook's matchConditions. */}}
{{- define "dynmig.resourceNames" -}}
{{- $nv := (include "dynmig.deviceConfig" . | fromYaml).nvidia -}}
{{- if not (kindIs "map" $nv) }}{{ $nv = dict }}{{ end -}}
{{- dict
  "count" (toString ($nv.resourceCountName | default "nvidia.com/gpu"))
  "memory" (toString ($nv.resourceMemoryName | default "nvidia.com/gpumem"))
  "memoryPercentage" (toString ($nv.resourceMemoryPercentageName | default "nvidia.com/gpumem-percentage"))
  "cores" (toString ($nv.resourceCoreName | default "nvidia.com/gpucores"))
  | toJson -}}
{{- end -}}

{{/* The DRA extended resources (`nvidia.com/mig-<profile>` names a DeviceClass maps) as a JSON
list: serve's --dra-extended-resource, left to kube-scheduler by admission. Empty without DRA. */}}
{{- define "dynmig.draExtendedResources" -}}
{{- $names := list -}}
{{- if .Values.draPlugin.enabled -}}
{{- range $profile := .Values.draPlugin.extendedResources.profiles -}}
{{- $names = append $names (printf "%s%s" $.Values.draPlugin.extendedResources.resourcePrefix $profile) -}}
{{- end -}}
{{- end -}}
{{- $names | toJson -}}
{{- end -}}

{{/* The pod annotations /mutate reads on any pod, whatever it asks for: the reservation it guards
(hami.io/vgpu-mig-allocations) and the scheduling annotations it checks (size, preference), as a JSON
list. webhooks/admission.py's rules; tests/charts/test_chart_mutating_conditions.py keeps the two in
line. */}}
{{- define "dynmig.guardedAnnotations" -}}
{{- list "hami.io/vgpu-mig-allocations" "nvidia.com/mig-profile-preference" "hami.io/node-scheduler-policy" "hami.io/gpu-scheduler-policy" "nvidia.com/use-gpuuuid" "nvidia.com/nouse-gpuuuid" "nvidia.com/use-gputype" "nvidia.com/nouse-gputype" | toJson -}}
{{- end -}}

{{/* The mutating webhook's matchCondition (CEL): exactly the pod creations /mutate acts on, so a
serve outage never blocks any other pod. A pod is sent when it carries an annotation /mutate guards,
or when it names dynmig's scheduler or the default one and one of its containers or init containers
asks (limits or requests, even at 0) for the count, memory or memory-percentage resource, or for a
`nvidia.com/mig-*` profile that admission translates (not a DRA extended resource). Ephemeral
containers cannot be set on create. */}}
{{- define "dynmig.mutateCondition" -}}
{{- $names := include "dynmig.resourceNames" . | fromJson -}}
{{- $wanted := list $names.count $names.memory $names.memoryPercentage | toJson -}}
{{- $asks := printf "k in %s || (k.startsWith('nvidia.com/mig-') && !(k in %s))" $wanted (include "dynmig.draExtendedResources" .) -}}
{{- $asksIn := printf "(has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, %s)) || (has(c.resources.requests) && c.resources.requests.exists(k, %s))))" $asks $asks -}}
{{- $listed := "(has(object.spec.initContainers) ? object.spec.initContainers : []) + (has(object.spec.containers) ? object.spec.containers : [])" -}}
{{- $scheduler := printf "(!has(object.spec.schedulerName) || object.spec.schedulerName in ['', 'default-scheduler', %s])" (.Values.schedulerName | toJson) -}}
{{- $annotated := printf "(has(object.metadata.annotations) && object.metadata.annotations.exists(k, k in %s))" (include "dynmig.guardedAnnotations" .) -}}
{{- printf "%s || (%s && (%s).exists(c, %s))" $annotated $scheduler $listed $asksIn -}}
{{- end -}}

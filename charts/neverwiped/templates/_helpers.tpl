{{/* The chart's name, or nameOverride. */}}
{{- define "neverwiped.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name, the base of every object's name: fullnameOverride, else the release
name when it already holds the chart's name, else RELEASE-neverwiped.
*/}}
{{- define "neverwiped.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The operator's objects: the full name with "-operator". */}}
{{- define "neverwiped.operatorName" -}}
{{- printf "%s-operator" (include "neverwiped.fullname" . | trunc 54 | trimSuffix "-") }}
{{- end }}

{{/* The in-cluster REST server's objects. */}}
{{- define "neverwiped.restServerName" -}}
{{- printf "%s-rest-server" (include "neverwiped.fullname" . | trunc 51 | trimSuffix "-") }}
{{- end }}

{{- define "neverwiped.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "neverwiped.labels" -}}
helm.sh/chart: {{ include "neverwiped.chart" . }}
app.kubernetes.io/name: {{ include "neverwiped.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: neverwiped
{{- end }}

{{/* What selects the operator's pods. */}}
{{- define "neverwiped.operatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "neverwiped.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* What selects the REST server's pod. */}}
{{- define "neverwiped.restServerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "neverwiped.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: rest-server
{{- end }}

{{- define "neverwiped.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "neverwiped.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
An image reference from {repository, tag, digest}: REPOSITORY:TAG[@DIGEST]; the tag defaults to
the chart's appVersion. Call with (dict "image" .Values.image "context" $).
*/}}
{{- define "neverwiped.image" -}}
{{- $tag := .image.tag | default .context.Chart.AppVersion | toString }}
{{- if .image.digest }}
{{- printf "%s:%s@%s" .image.repository $tag .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository $tag }}
{{- end }}
{{- end }}


{{/* The operator's rules on cluster-scoped resources: a PVC's CSI driver, a driver's class. */}}
{{- define "neverwiped.clusterScopedRules" }}
  - apiGroups: [storage.k8s.io]
    resources: [storageclasses]
    verbs: [list]
  - apiGroups: [snapshot.storage.k8s.io]
    resources: [volumesnapshotclasses]
    verbs: [list]
  # Whether a Restore's creator may read the plan's Secrets and write its targets.
  - apiGroups: [authorization.k8s.io]
    resources: [subjectaccessreviews]
    verbs: [create]
{{- end }}

{{- /*
The repository URL prefixes the operator allows, as YAML {prefixes: [...]}, or {} for any URL:
policy.allowedRepositoryPrefixes when set; otherwise, with tenancy multi, only the in-cluster REST
server (when enabled), else none; with tenancy single, any.
*/}}
{{- define "neverwiped.repositoryPrefixes" }}
{{- $prefixes := .Values.policy.allowedRepositoryPrefixes }}
{{- if not (kindIs "invalid" $prefixes) }}
{{- dict "prefixes" $prefixes | toYaml }}
{{- else if eq .Values.tenancy "multi" }}
{{- $server := list }}
{{- if .Values.restServer.enabled }}
{{- $server = list (printf "http://%s.%s.svc:%v/" (include "neverwiped.restServerName" .) .Release.Namespace .Values.restServer.port) }}
{{- end }}
{{- dict "prefixes" $server | toYaml }}
{{- else }}
{{- dict | toYaml }}
{{- end }}
{{- end }}

{{/* The release's full name, used for the cluster-wide objects. */}}
{{- define "kubeherd.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kubeherd.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kubeherd.labels" -}}
{{ include "kubeherd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kubeherd.serviceAccountName" -}}
{{- default (include "kubeherd.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Several replicas: Kopf peering keeps one active. */}}
{{- define "kubeherd.peered" -}}
{{- if gt (int .Values.replicaCount) 1 -}}true{{- end -}}
{{- end -}}

{{/* The webhook's Service; the Secret of its certificate is this name and "-tls". */}}
{{- define "kubeherd.webhookService" -}}
{{- printf "%s-webhook" (include "kubeherd.fullname" .) | trunc 59 | trimSuffix "-" -}}
{{- end -}}

{{/* The operator's image: by digest when one is given, else by tag. */}}
{{- define "kubeherd.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* topologySpreadConstraints; an entry without a labelSelector selects the operator's pods. */}}
{{- define "kubeherd.topologySpreadConstraints" -}}
{{- $operatorPods := dict "matchLabels" (include "kubeherd.selectorLabels" . | fromYaml) -}}
{{- $constraints := list -}}
{{- range .Values.topologySpreadConstraints -}}
{{- $constraints = append $constraints (merge (dict "labelSelector" (.labelSelector | default $operatorPods)) (omit . "labelSelector")) -}}
{{- end -}}
{{- toYaml $constraints -}}
{{- end -}}

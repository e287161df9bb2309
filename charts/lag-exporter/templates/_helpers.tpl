{{/*
The chart name, truncated to 63 characters (the limit of a DNS label and of a label value).
*/}}
{{- define "lag-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The resource name prefix: the release name, plus the chart name unless the release name already holds it.
Truncated to 63 characters.
*/}}
{{- define "lag-exporter.fullname" -}}
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

{{/*
"name-version" for the helm.sh/chart label.
*/}}
{{- define "lag-exporter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels that select this release's pods: stable across upgrades, so never the chart version.
*/}}
{{- define "lag-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lag-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The full label set of every object.
*/}}
{{- define "lag-exporter.labels" -}}
helm.sh/chart: {{ include "lag-exporter.chart" . }}
{{ include "lag-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: lag-exporter
app.kubernetes.io/part-of: streamstack
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The image reference: repository:tag, tag defaulting to appVersion, plus @digest when given.
*/}}
{{- define "lag-exporter.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The service account's name.
*/}}
{{- define "lag-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lag-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Whether the exporter talks SASL to Kafka.
*/}}
{{- define "lag-exporter.usesSasl" -}}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}true{{ end }}
{{- end }}

{{/*
Settings that are valid one by one (values.schema.json) but not together. Each failure names the field.
*/}}
{{- define "lag-exporter.validate" -}}
{{- if and (include "lag-exporter.usesSasl" .) (not .Values.kafka.sasl.secretName) }}
{{- fail (printf "kafka.sasl.secretName is required with kafka.securityProtocol %s (the Secret of the exporter's KafkaUser)" .Values.kafka.securityProtocol) }}
{{- end }}
{{- if and .Values.kafka.tls.caSecretName (not (hasSuffix "SSL" .Values.kafka.securityProtocol)) }}
{{- fail (printf "kafka.tls.caSecretName is set but kafka.securityProtocol %s does not use TLS (use SSL or SASL_SSL)" .Values.kafka.securityProtocol) }}
{{- end }}
{{- if lt (float64 .Values.exporter.window) (mulf 2 (float64 .Values.exporter.refreshInterval)) }}
{{- fail (printf "exporter.window %v: must be at least twice exporter.refreshInterval (%v)" .Values.exporter.window .Values.exporter.refreshInterval) }}
{{- end }}
{{- with .Values.postgres }}
{{- if .host }}
{{- range $field := list "user" "database" "slot" }}
{{- if not (index $.Values.postgres $field) }}
{{- fail (printf "postgres.%s is required with postgres.host" $field) }}
{{- end }}
{{- end }}
{{- if not .passwordSecret.name }}
{{- fail "postgres.passwordSecret.name is required with postgres.host (the Secret holding the database password)" }}
{{- end }}
{{- end }}
{{- end }}
{{- $managed := list "STREAMSTACK_LAG_BOOTSTRAP_SERVERS" "STREAMSTACK_LAG_LISTEN" "STREAMSTACK_LAG_REFRESH_INTERVAL" "STREAMSTACK_LAG_WINDOW" "STREAMSTACK_LAG_KAFKA_TIMEOUT" "STREAMSTACK_LAG_GRANULARITY" "STREAMSTACK_LAG_SHADOW_PREFIX" "STREAMSTACK_LAG_NO_GROUPS" "STREAMSTACK_LAG_NO_COMMIT_LOG" "STREAMSTACK_LAG_LOG_LEVEL" "STREAMSTACK_KAFKA_SECURITY_PROTOCOL" "STREAMSTACK_KAFKA_SASL_MECHANISM" "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG" "STREAMSTACK_KAFKA_SSL_CA_FILE" "STREAMSTACK_LAG_POSTGRES_HOST" "STREAMSTACK_LAG_POSTGRES_PASSWORD_FILE" "PGPASSWORD" }}
{{- range .Values.extraEnv }}
{{- if has .name $managed }}
{{- fail (printf "extraEnv %s: the chart sets this variable from exporter.*/kafka.*; set the value there" .name) }}
{{- end }}
{{- end }}
{{- $names := list }}
{{- range .Values.checkpoints }}
{{- if has .name $names }}
{{- fail (printf "checkpoints: name %q given more than once" .name) }}
{{- end }}
{{- $names = append $names .name }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (gt (int (include "lag-exporter.durationSeconds" .Values.serviceMonitor.scrapeTimeout)) (int (include "lag-exporter.durationSeconds" .Values.serviceMonitor.interval))) }}
{{- fail (printf "serviceMonitor.scrapeTimeout %s: must not exceed serviceMonitor.interval %s" .Values.serviceMonitor.scrapeTimeout .Values.serviceMonitor.interval) }}
{{- end }}
{{- end }}

{{/*
Seconds in a Prometheus duration of one unit (30s, 1m, 1h), the only forms the schema allows.
*/}}
{{- define "lag-exporter.durationSeconds" -}}
{{- $unit := regexFind "[smh]$" . }}
{{- $amount := trimSuffix $unit . | int }}
{{- if eq $unit "m" }}{{ mul $amount 60 }}{{ else if eq $unit "h" }}{{ mul $amount 3600 }}{{ else }}{{ $amount }}{{ end }}
{{- end }}

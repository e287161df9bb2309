{{/*
The chart name, truncated to 63 characters (the limit of a DNS label and of a label value).
*/}}
{{- define "streaming-job.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The resource name prefix: the release name, plus the chart name unless the release name already holds it.
Truncated to 63 characters.
*/}}
{{- define "streaming-job.fullname" -}}
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
{{- define "streaming-job.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels that select this release's pods: stable across upgrades, so never the chart version.
spark-operator copies the SparkApplication's labels onto the driver and executor pods.
*/}}
{{- define "streaming-job.selectorLabels" -}}
app.kubernetes.io/name: {{ include "streaming-job.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The full label set of every object.
*/}}
{{- define "streaming-job.labels" -}}
helm.sh/chart: {{ include "streaming-job.chart" . }}
{{ include "streaming-job.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: streaming-job
app.kubernetes.io/part-of: streamstack
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels of the driver pod only: spark-role is set by Spark itself.
*/}}
{{- define "streaming-job.driverSelectorLabels" -}}
{{ include "streaming-job.selectorLabels" . }}
spark-role: driver
{{- end }}

{{/*
The image reference: repository:tag, tag defaulting to appVersion, plus @digest when given.
*/}}
{{- define "streaming-job.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The checkpoint claim: the existing one, or the one this chart creates.
*/}}
{{- define "streaming-job.checkpointClaimName" -}}
{{- if .Values.checkpoint.existingClaim }}
{{- .Values.checkpoint.existingClaim }}
{{- else }}
{{- printf "%s-checkpoints" (include "streaming-job.fullname" . | trunc 51 | trimSuffix "-") }}
{{- end }}
{{- end }}

{{/*
Whether the job talks SASL to Kafka.
*/}}
{{- define "streaming-job.usesSasl" -}}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}true{{ end }}
{{- end }}

{{/*
Settings that are valid one by one (values.schema.json) but not together. Each failure names the field.
*/}}
{{- define "streaming-job.validate" -}}
{{- if and .Values.job.stateful (eq .Values.checkpoint.accessMode "ReadWriteOncePod") }}
{{- fail "checkpoint.accessMode ReadWriteOncePod: a stateful job (job.stateful: true) writes state from every executor, but a ReadWriteOncePod volume reaches only the driver; use ReadWriteMany" }}
{{- end }}
{{- if and .Values.job.stateful (eq .Values.checkpoint.accessMode "ReadWriteOnce") (not .Values.checkpoint.singleNode) (not .Values.checkpoint.existingClaim) }}
{{- fail "checkpoint.accessMode ReadWriteOnce: a stateful job (job.stateful: true) writes state from every executor, and a ReadWriteOnce volume only reaches pods on one node; use ReadWriteMany, or set checkpoint.singleNode: true on a one-node cluster" }}
{{- end }}
{{- $imageSpark := regexFind "spark[0-9]+[.][0-9]+[.][0-9]+$" (.Values.image.tag | default .Chart.AppVersion) | trimPrefix "spark" }}
{{- if and $imageSpark (ne $imageSpark .Values.sparkVersion) }}
{{- fail (printf "sparkVersion %s: the image tag says Spark %s; set sparkVersion to the image's Spark version" .Values.sparkVersion $imageSpark) }}
{{- end }}
{{- if and (include "streaming-job.usesSasl" .) (not .Values.kafka.sasl.secretName) }}
{{- fail (printf "kafka.sasl.secretName is required with kafka.securityProtocol %s (the Secret of the job's KafkaUser)" .Values.kafka.securityProtocol) }}
{{- end }}
{{- if and .Values.kafka.tls.caSecretName (not (hasSuffix "SSL" .Values.kafka.securityProtocol)) }}
{{- fail (printf "kafka.tls.caSecretName is set but kafka.securityProtocol %s does not use TLS (use SSL or SASL_SSL)" .Values.kafka.securityProtocol) }}
{{- end }}
{{- if and .Values.metrics.podMonitor.enabled (gt (int (include "streaming-job.durationSeconds" .Values.metrics.podMonitor.scrapeTimeout)) (int (include "streaming-job.durationSeconds" .Values.metrics.podMonitor.interval))) }}
{{- fail (printf "metrics.podMonitor.scrapeTimeout %s: must not exceed metrics.podMonitor.interval %s" .Values.metrics.podMonitor.scrapeTimeout .Values.metrics.podMonitor.interval) }}
{{- end }}
{{- end }}

{{/*
Seconds in a Prometheus duration of one unit (30s, 1m, 1h), the only forms the schema allows.
*/}}
{{- define "streaming-job.durationSeconds" -}}
{{- $unit := regexFind "[smh]$" . }}
{{- $amount := trimSuffix $unit . | int }}
{{- if eq $unit "m" }}{{ mul $amount 60 }}{{ else if eq $unit "h" }}{{ mul $amount 3600 }}{{ else }}{{ $amount }}{{ end }}
{{- end }}

{{/*
Pod metadata and spec shared by the driver and executor pod templates. Spark starts from the template and
adds its own containers' settings, volumes and labels; the template is how the security context, ports,
tolerations and node selection reach the pods without spark-operator's mutating webhook.
*/}}
{{- define "streaming-job.podTemplateMetadata" -}}
{{- $root := .root -}}
labels:
  {{- include "streaming-job.selectorLabels" $root | nindent 2 }}
  {{- with $root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- /* Accepted checkov findings for the pods Spark starts from this template, each with its reason. */}}
{{- $skips := list }}
{{- if not $root.Values.image.digest }}
{{- $skips = append $skips "CKV_K8S_43=Pinned by tag (image.tag, never latest); images loaded with `kind load` have no registry digest. Set image.digest to pin by digest." }}
{{- end }}
{{- if ne $root.Values.image.pullPolicy "Always" }}
{{- $skips = append $skips "CKV_K8S_15=IfNotPresent lets kind use images loaded with `kind load`; tags are immutable release pins, so a cached image is the right one." }}
{{- end }}
{{- $skips = append $skips "CKV_K8S_40=uid 185 is the spark user the official Spark image is built around (its files, its passwd entry); runAsNonRoot still holds." }}
{{- $skips = append $skips "CKV_K8S_8=Spark creates driver and executor pods with restartPolicy Never: spark-operator restarts the application on failure and the job's streamstack_query_seconds_since_last_progress shows a hung query." }}
{{- $skips = append $skips "CKV_K8S_9=Nothing routes traffic to Spark pods through a Service that readiness would gate; executors register with the driver themselves." }}
{{- if eq .role "driver" }}
{{- $skips = append $skips "CKV_K8S_38=The driver creates, watches and deletes its executor pods through the Kubernetes API, so it needs its service account token (executors get none)." }}
{{- end }}
{{- if include "streaming-job.usesSasl" $root }}
{{- $skips = append $skips "CKV_K8S_35=Spark passes a Secret to its pods only as a mounted directory or as secretKeyRef environment variables; the Kafka client takes sasl.jaas.config as a setting, and it never reaches an argument, the Spark conf or a log." }}
{{- end }}
annotations:
  {{- range $index, $skip := $skips }}
  checkov.io/skip{{ add1 $index }}: {{ $skip | quote }}
  {{- end }}
  {{- with $root.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{- define "streaming-job.podTemplateSpec" -}}
automountServiceAccountToken: {{ .automountToken }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

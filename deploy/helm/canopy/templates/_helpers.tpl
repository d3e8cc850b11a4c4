{{/* Names: <release>-<chart> unless overridden, cut to DNS label length. */}}
{{- define "canopy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "canopy.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* StatefulSet pod names get "-<ordinal>" and a controller-revision label of
     the name plus a hash: keep the base short enough for both. */}}
{{- define "canopy.projector.fullname" -}}
{{- printf "%s-projector" (include "canopy.fullname" .) | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/* The headless Service that gives each projector pod its stable DNS name. */}}
{{- define "canopy.projector.headless" -}}
{{- printf "%s-headless" (include "canopy.projector.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "canopy.gateway.fullname" -}}
{{- printf "%s-gateway" (include "canopy.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "canopy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "canopy.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "canopy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "canopy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: canopy
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "canopy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "canopy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Component labels: call with (dict "ctx" $ "component" "projector"). */}}
{{- define "canopy.componentLabels" -}}
{{ include "canopy.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "canopy.componentSelectorLabels" -}}
{{ include "canopy.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "canopy.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The projector's termination grace period: long enough for the batch in
     hand to finish and commit (a commit is bounded by the transaction
     timeout), then to leave the group and close Pebble. */}}
{{- define "canopy.projector.gracePeriod" -}}
{{- $tx := int .Values.projector.transactionTimeoutSeconds -}}
{{- $grace := .Values.projector.terminationGracePeriodSeconds -}}
{{- if kindIs "invalid" $grace -}}
{{- add $tx 30 -}}
{{- else if le (int $grace) $tx -}}
{{- fail (printf "projector.terminationGracePeriodSeconds (%d) must exceed projector.transactionTimeoutSeconds (%d): a pod killed mid-commit aborts its batch and the next owner redoes it" (int $grace) $tx) -}}
{{- else -}}
{{- int $grace -}}
{{- end -}}
{{- end -}}

{{/* Kafka connection environment shared by projector, gateway and the topics
     Job. Credentials come from Secrets by reference, never from values. */}}
{{- define "canopy.kafkaEnv" -}}
{{- if not .Values.kafka.brokers }}
{{- fail "kafka.brokers is required: host:port[,host:port...] of your Kafka cluster" }}
{{- end }}
- name: CANOPY_BROKERS
  value: {{ .Values.kafka.brokers | quote }}
- name: CANOPY_TOPIC_PREFIX
  value: {{ .Values.kafka.topicPrefix | quote }}
{{- if or .Values.kafka.tls.enabled .Values.kafka.tls.caSecret.name .Values.kafka.tls.clientSecret.name }}
- name: CANOPY_KAFKA_TLS
  value: "true"
{{- end }}
{{- if .Values.kafka.tls.caSecret.name }}
- name: CANOPY_KAFKA_TLS_CA
  value: /etc/canopy/kafka-ca/{{ .Values.kafka.tls.caSecret.key }}
{{- end }}
{{- if .Values.kafka.tls.clientSecret.name }}
{{- /* mTLS: the client certificate and key are files of a kubernetes.io/tls Secret. */}}
- name: CANOPY_KAFKA_TLS_CERT
  value: /etc/canopy/kafka-client/tls.crt
- name: CANOPY_KAFKA_TLS_KEY
  value: /etc/canopy/kafka-client/tls.key
{{- end }}
{{- with .Values.kafka.sasl }}
{{- if .mechanism }}
{{- if not .existingSecret }}
{{- fail "kafka.sasl.existingSecret is required with kafka.sasl.mechanism: the chart reads the SASL user and password from a Secret" }}
{{- end }}
- name: CANOPY_SASL_MECHANISM
  value: {{ .mechanism | quote }}
- name: CANOPY_SASL_USER
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .usernameKey }}
- name: CANOPY_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .passwordKey }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "canopy.kafkaVolumeMounts" -}}
{{- if .Values.kafka.tls.caSecret.name }}
- name: kafka-ca
  mountPath: /etc/canopy/kafka-ca
  readOnly: true
{{- end }}
{{- if .Values.kafka.tls.clientSecret.name }}
- name: kafka-client-tls
  mountPath: /etc/canopy/kafka-client
  readOnly: true
{{- end }}
{{- end -}}

{{- define "canopy.kafkaVolumes" -}}
{{- if .Values.kafka.tls.caSecret.name }}
- name: kafka-ca
  secret:
    secretName: {{ .Values.kafka.tls.caSecret.name }}
    items:
      - key: {{ .Values.kafka.tls.caSecret.key }}
        path: {{ .Values.kafka.tls.caSecret.key }}
{{- end }}
{{- if .Values.kafka.tls.clientSecret.name }}
- name: kafka-client-tls
  secret:
    secretName: {{ .Values.kafka.tls.clientSecret.name }}
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- end -}}

{{/* OTEL_* for a component: call with (dict "ctx" $ "service" "canopy-projector").
     The pod's identity goes into the resource attributes from the downward
     API (POD_NAME and POD_NAMESPACE must be set before these). */}}
{{- define "canopy.otelEnv" -}}
{{- $v := .ctx.Values.otel -}}
{{- if $v.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $v.endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ $v.protocol | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ .service | quote }}
{{- $attrs := list "k8s.pod.name=$(POD_NAME)" "k8s.namespace.name=$(POD_NAMESPACE)" (printf "service.version=%s" .ctx.Chart.AppVersion) }}
{{- range $k, $val := $v.resourceAttributes }}
{{- $attrs = append $attrs (printf "%s=%s" $k $val) }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $attrs | quote }}
{{- if $v.headersSecret.name }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ $v.headersSecret.name }}
      key: {{ $v.headersSecret.key }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Downward API identity every pod gets first, so later variables can use
     $(POD_NAME) and $(POD_NAMESPACE). */}}
{{- define "canopy.podIdentityEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- end -}}

{{/* GOMEMLIMIT at 90% of the container's memory limit, in bytes: call with
     (dict "enabled" bool "resources" map "container" name). The Go runtime's
     limit bounds only the memory the runtime manages, while the cgroup also
     charges what it does not (thread stacks outside the heap, page cache the
     process reads through, kernel buffers): at 100% the collector would
     start working hard only when the kernel is about to OOM-kill. The
     downward API can only pass the whole limit, so the chart computes it
     from the value. */}}
{{- define "canopy.goMemLimitEnv" -}}
{{- if and .enabled .resources .resources.limits .resources.limits.memory }}
{{- /* 90% of the limit, less what the container allocates outside the Go
       heap that the chart knows of (.reserve bytes: the projector's Pebble
       memtables and block cache), as the projector's own -memory-limit does. */}}
{{- $v := include "canopy.bytes" .resources.limits.memory | float64 | mulf 0.9 | floor }}
- name: GOMEMLIMIT
  value: {{ subf $v (.reserve | default 0 | float64) | printf "%.0f" | quote }}
{{- end }}
{{- end -}}

{{/* canopy.bytes is a Kubernetes memory quantity in bytes: a number with an
     optional k, M, G, T, P, Ki, Mi, Gi, Ti or Pi suffix or an exponent
     (e9), as values.schema.json accepts. Anything else (m, milli-bytes)
     fails the render rather than yield a wrong GOMEMLIMIT. */}}
{{- define "canopy.bytes" -}}
{{- if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}
{{- float64 . | printf "%.0f" -}}
{{- else -}}
{{- $q := toString . -}}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $suffix := trimPrefix $n $q -}}
{{- $mult := dict "" 1.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 -}}
{{- if regexMatch "^e[0-9]+$" $suffix -}}
{{- $e := 1.0 -}}
{{- range until (trimPrefix "e" $suffix | int) }}{{ $e = mulf $e 10 }}{{ end -}}
{{- $_ := set $mult $suffix $e -}}
{{- end -}}
{{- if or (not $n) (not (hasKey $mult $suffix)) -}}
{{- fail (printf "memory limit %q: want a number with an optional k, M, G, T, P, Ki, Mi, Gi, Ti or Pi suffix or an exponent (GOMEMLIMIT is derived from it)" $q) -}}
{{- end -}}
{{- mulf (float64 $n) (get $mult $suffix) | printf "%.0f" -}}
{{- end -}}
{{- end -}}

{{- define "canopy.probe" -}}
initialDelaySeconds: {{ .initialDelaySeconds }}
periodSeconds: {{ .periodSeconds }}
timeoutSeconds: {{ .timeoutSeconds }}
failureThreshold: {{ .failureThreshold }}
{{- end -}}

{{/* The operator's redaction rules (values redaction), the projector's and
     the gateway's alike: CANOPY_REDACT_PATTERN one rule name=regexp per
     line, CANOPY_REDACT_FIELD comma-separated. */}}
{{- define "canopy.redactionEnv" -}}
{{- with .Values.redaction.patterns }}
{{- $rules := list }}
{{- range . }}
{{- $rules = append $rules (printf "%s=%s" .name .regexp) }}
{{- end }}
- name: CANOPY_REDACT_PATTERN
  value: {{ join "\n" $rules | quote }}
{{- end }}
{{- with .Values.redaction.fields }}
- name: CANOPY_REDACT_FIELD
  value: {{ join "," . | quote }}
{{- end }}
{{- end -}}

{{- define "fairness-monitor.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "fairness-monitor.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "fairness-monitor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fairness-monitor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "fairness-monitor.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "fairness-monitor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "fairness-monitor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "fairness-monitor.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "fairness-monitor.claimName" -}}
{{- default (printf "%s-state" (include "fairness-monitor.fullname" .)) .Values.persistence.existingClaim }}
{{- end }}

{{- /*
The checkpoint store the pods use: config.checkpoint.store when set; otherwise "kafka" when
several replicas run without persistence (a compacted state topic, so any replica restores any
partition without a shared volume), else "sqlite" (a file in the data directory).
*/}}
{{- define "fairness-monitor.checkpointStore" -}}
{{- $store := dig "checkpoint" "store" "" .Values.config }}
{{- if $store }}{{ $store }}
{{- else if and (gt (int .Values.replicaCount) 1) (not .Values.persistence.enabled) }}kafka
{{- else }}sqlite
{{- end }}
{{- end }}

{{- /* The monitor's configuration as the ConfigMap holds it: config, with the store above;
several replicas on the state topic judge alerts over all their partitions (alerts.scope:
global, one replica delivering) unless config.alerts.scope says otherwise. */}}
{{- define "fairness-monitor.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- $checkpoint := dig "checkpoint" dict $cfg | default dict }}
{{- $store := include "fairness-monitor.checkpointStore" . }}
{{- $_ := set $checkpoint "store" $store }}
{{- $_ := set $cfg "checkpoint" $checkpoint }}
{{- if and (eq $store "kafka") (gt (int .Values.replicaCount) 1) }}
{{- $alerts := dig "alerts" dict $cfg | default dict }}
{{- $_ := set $alerts "scope" (include "fairness-monitor.alertScope" .) }}
{{- $_ := set $cfg "alerts" $alerts }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{- /* alerts.scope as the pods run it: config.alerts.scope, else "global" for several replicas
on the state topic, else "local". */}}
{{- define "fairness-monitor.alertScope" -}}
{{- $scope := dig "alerts" "scope" "" .Values.config }}
{{- if $scope }}{{ $scope }}
{{- else if and (eq (include "fairness-monitor.checkpointStore" .) "kafka") (gt (int .Values.replicaCount) 1) }}global
{{- else }}local
{{- end }}
{{- end }}

{{- /* Combinations that cannot work, refused at render time with what to set instead. */}}
{{- define "fairness-monitor.checkStorage" -}}
{{- $store := include "fairness-monitor.checkpointStore" . }}
{{- $replicas := int .Values.replicaCount }}
{{- $p := .Values.persistence }}
{{- if .Values.kafka.credentials.existingSecret }}
{{- range $k := list "sasl_username" "sasl_username_env" "sasl_username_file" "sasl_password" "sasl_password_env" "sasl_password_file" }}
{{- if hasKey ($.Values.config.kafka | default dict) $k }}
{{- fail (printf "config.kafka.%s with kafka.credentials.existingSecret: the secret gives the SASL username and password; remove config.kafka.%s (or the secret)" $k $k) }}
{{- end }}
{{- end }}
{{- end }}
{{- if eq $store "kafka" }}
{{- if $p.enabled }}
{{- fail "persistence.enabled=true with config.checkpoint.store: kafka: the checkpoints are in the state topic and the data directory is an emptyDir; set persistence.enabled=false (or use checkpoint.store: sqlite for a checkpoint file on the volume)" }}
{{- end }}
{{- else if gt $replicas 1 }}
{{- if not $p.enabled }}
{{- fail (printf "replicaCount %d with config.checkpoint.store: sqlite and no persistence: each replica would keep its checkpoint on its own emptyDir, and a partition that moves to another replica would start without its state; use config.checkpoint.store: kafka (a state topic, no volume; docs/deploy.md, Scaling out)" $replicas) }}
{{- else if ne $p.accessMode "ReadWriteMany" }}
{{- fail (printf "replicaCount %d with the SQLite checkpoint on a %s volume: the replicas would share one checkpoint file, which needs persistence.accessMode: ReadWriteMany; or use config.checkpoint.store: kafka (a state topic, no shared volume, persistence.enabled=false; docs/deploy.md, Scaling out)" $replicas $p.accessMode) }}
{{- end }}
{{- end }}
{{- end }}

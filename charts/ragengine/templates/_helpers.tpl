{{- define "ragengine.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "ragengine.labels" -}}
app.kubernetes.io/name: ragengine-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ragengine.selector" -}}
app.kubernetes.io/name: ragengine-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ragengine.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "ragengine.fullname" .) .Values.serviceAccount.name }}{{- else -}}{{ default "default" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}

{{/* "true" when every watched namespace is an exact name: Roles in those namespaces suffice. */}}
{{- define "ragengine.namespacedRbac" -}}
{{- $exact := gt (len .Values.watchNamespaces) 0 -}}
{{- range .Values.watchNamespaces }}{{ if regexMatch "[*?\\[!]" . }}{{ $exact = false }}{{ end }}{{ end -}}
{{- $exact -}}
{{- end -}}

{{/* The operator's rules on namespaced resources (a Role per watched namespace, or the ClusterRole). */}}
{{- define "ragengine.rules" -}}
# the RAGEngines: watch, kopf's annotations (patch), status
- apiGroups: [ragengine.io]
  resources: [ragengines]
  verbs: [get, list, watch, patch]
- apiGroups: [ragengine.io]
  resources: [ragengines/status]
  verbs: [get, patch]
# children carry blockOwnerDeletion: true; with OwnerReferencesPermissionEnforcement (OpenShift,
# hardened clusters) setting it needs update on the owner's finalizers, else every apply is refused.
- apiGroups: [ragengine.io]
  resources: [ragengines/finalizers]
  verbs: [update]
# children: server-side apply (patch creates), observe, delete the vLLM ones on a switch to url mode
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services, persistentvolumeclaims]
  verbs: [get, create, patch, delete]
# Secrets: create (server-side apply) the generated API keys (<name>-api-key, <name>-inference-api-key,
# labelled app.kubernetes.io/managed-by=ragengine-operator), never update or delete one; get reads the
# metadata of referenced Secrets (config-hash) and a source Secret's type (as a table row: no data), and the
# push receiver reads the 'token' of a source's webhook Secret (spec.sources[].webhook.secretRef).
# RBAC cannot narrow create to names or labels: the admission policy (values admissionPolicy) does.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch]
# spec.sources: a configMap source's ConfigMap (get by name: its resourceVersion; never list);
# spec.guardrails without configMapRef: the default policy's ConfigMap <name>-guardrails (owned); spec.embedding:
# the engine's embedding file, <name>-embedding (server-side apply; it goes with the RAGEngine)
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, create, patch, delete]
# spec.sources: each sync is a Job in the RAGEngine's namespace (its pod is watched below); spec.backup: a CronJob
- apiGroups: [batch]
  resources: [jobs, cronjobs]
  verbs: [get, create, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch, delete]
# external vector store: a PodDisruptionBudget, and an HPA when engine.autoscaling is set
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch, delete]
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [get, create, patch, delete]
# add-ons, used only when a RAGEngine asks (spec.observability.metrics, inference.autoscaling.keda): scrape
# configuration for the Prometheus operator, and KEDA's ScaledObject on the vLLM Deployment
- apiGroups: [monitoring.coreos.com]
  resources: [servicemonitors, podmonitors]
  verbs: [get, create, patch, delete]
- apiGroups: [keda.sh]
  resources: [scaledobjects]
  verbs: [get, create, patch, delete]
# spec.access.serviceAccounts: the engine reviews app tokens (TokenReview) as a ServiceAccount of its own,
# bound to system:auth-delegator by a ClusterRoleBinding per RAGEngine (cluster-scoped: no owner reference,
# so the operator lists and deletes those of deleted RAGEngines). bind: only that one ClusterRole.
# (the cluster-scoped half is ragengine.clusterRules)
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create, patch, delete]
# pods: watched so a container failure is reported at once, and a sync Job's result is read
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
# events: kopf posts ours (core/v1); list finds the kubelet's FailedMount of a stuck pod
- apiGroups: [""]
  resources: [events]
  verbs: [create, list]
{{- end -}}

{{/* Cluster-scoped objects the operator manages whatever namespaces it watches: the TokenReview bindings of
spec.access.serviceAccounts (a ClusterRoleBinding per RAGEngine to system:auth-delegator, and nothing else). */}}
{{- define "ragengine.clusterRules" -}}
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterrolebindings]
  verbs: [get, list, create, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterroles]
  verbs: [bind]
  resourceNames: [system:auth-delegator]
{{- end -}}

{{/* The operator's webhook Service (conversion), which the CRD's subchart names too: the chart name is spelt
out, so the parent and the ragengine-crds subchart render the same name. */}}
{{- define "ragengine.webhookService" -}}
{{- if contains "ragengine" .Release.Name -}}{{ printf "%s-webhook" .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-ragengine-webhook" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{/* Names. */}}
{{- define "spool.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "spool.peers" -}}{{ include "spool.fullname" . }}-peers{{- end -}}

{{- define "spool.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "spool.labels" -}}
{{ include "spool.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Checks that fail the render with what to change. */}}
{{- define "spool.validate" -}}
{{- if not (has .Values.mode (list "statefulset" "deployment")) -}}
{{- fail (printf "mode %q: must be statefulset or deployment" .Values.mode) -}}
{{- end -}}
{{- if not (has (toString .Values.cluster.storage) (list "on" "off")) -}}
{{- fail (printf "cluster.storage %q: must be \"on\" or \"off\" (quoted: YAML reads a bare on/off as a boolean)" (toString .Values.cluster.storage)) -}}
{{- end -}}
{{- if not (has .Values.cluster.bootstrap (list "auto" "always" "never")) -}}
{{- fail (printf "cluster.bootstrap %q: must be auto, always or never" .Values.cluster.bootstrap) -}}
{{- end -}}
{{- if not (has .Values.cluster.finalize (list "auto" "manual")) -}}
{{- fail (printf "cluster.finalize %q: must be auto or manual" (toString .Values.cluster.finalize)) -}}
{{- end -}}
{{- $fin := int (include "spool.seconds" .Values.cluster.autoFinalizeAfter) -}}
{{- if or (lt $fin 60) (gt $fin 604800) -}}
{{- fail (printf "cluster.autoFinalizeAfter %s: must be between 1m and 168h" (toString .Values.cluster.autoFinalizeAfter)) -}}
{{- end -}}
{{- if and .Values.cluster.enabled (eq .Values.mode "statefulset") (eq (toString .Values.cluster.storage) "off") -}}
{{- fail "mode statefulset with cluster.storage \"off\": the volumes would hold nothing; use mode deployment for storage-off sidecars" -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (ne .Values.mode "deployment") -}}
{{- fail "autoscaling.enabled needs mode deployment: scaling storage nodes in and out moves replicas (docs/kubernetes.md)" -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (include "spool.storageOn" .) -}}
{{- fail "autoscaling.enabled with cluster.storage \"on\": every scale-in and scale-out of storage nodes moves replicas; autoscale storage-off sidecars (cluster.storage \"off\") and size the storage nodes by hand (docs/kubernetes.md, \"Autoscaling\")" -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (not .Values.autoscaling.group) -}}
{{- fail "autoscaling.enabled needs autoscaling.group: the consumer group whose spool_lag_seconds drives the scaling" -}}
{{- end -}}
{{- if and .Values.cluster.enabled (eq (toString .Values.cluster.storage) "off") (not .Values.cluster.join) -}}
{{- fail "cluster.storage \"off\" needs cluster.join: the host:port of members of a running cluster (storage-off sidecars hold nothing and learn the cluster from its members)" -}}
{{- end -}}
{{- if and (include "spool.storageOn" .) (lt (int .Values.replicas) (int .Values.cluster.replicationFactor)) -}}
{{- fail (printf "replicas %d is below cluster.replicationFactor %d: topics would wait for nodes that never come (publishes fail with TOPIC_NOT_PLACED); run at least as many storage nodes as the replication factor" (int .Values.replicas) (int .Values.cluster.replicationFactor)) -}}
{{- end -}}
{{- if not (kindIs "invalid" .Values.terminationGracePeriodSeconds) -}}
{{- $need := add (include "spool.shutdownSeconds" .) 5 -}}
{{- if lt (int .Values.terminationGracePeriodSeconds) (int $need) -}}
{{- fail (printf "terminationGracePeriodSeconds %d is shorter than spoold's own shutdown (%ds: node.drain_timeout %s%s, then up to 5 s to close its servers), which starts only after the app has exited: raise it, or leave it empty for the chart to compute it" (int .Values.terminationGracePeriodSeconds) (int $need) .Values.spoold.drainTimeout (ternary (printf " + cluster.leave_timeout %s" .Values.cluster.leaveTimeout) "" (eq (include "spool.leaves" .) "true"))) -}}
{{- end -}}
{{- end -}}
{{- $_ := include "spool.shutdownSeconds" . -}}{{- /* its durations read before the peer checks */ -}}
{{- include "spool.validatePeerSecurity" . -}}
{{- include "spool.validateRedisSecurity" . -}}
{{- end -}}

{{/* The ledger's Redis beyond the pod: TLS (redis.tls) or the explicit
     opt-out (redis.insecure), as spoold asks (guards.insecure_plaintext_remotes).
     A loopback address (a Redis container of the pod) needs neither. */}}
{{- define "spool.validateRedisSecurity" -}}
{{- if .Values.redis.addrs -}}
{{- if and (include "spool.redisTLSOn" .) .Values.redis.insecure -}}
{{- fail "redis.tls and redis.insecure: set only one of redis.tls and redis.insecure" -}}
{{- end -}}
{{- if and (include "spool.redisBeyondLoopback" .) (not (include "spool.redisTLSOn" .)) (not .Values.redis.insecure) -}}
{{- fail "redis.addrs beyond the pod needs TLS (spoold refuses to reach its ledger's Redis in plaintext beyond loopback): set redis.tls (true for the system's CAs, or secretName and serverName) or redis.insecure: true (no TLS: anyone on the path between the pods and Redis reads and changes the ledger and reads its password) (docs/security.md, \"Redis ledger\")" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Is redis.tls on? ("true" or "") As spoold reads it: true, or a mapping
     with enabled, secretName or serverName. */}}
{{- define "spool.redisTLSOn" -}}
{{- $rt := .Values.redis.tls -}}
{{- if kindIs "map" $rt -}}
{{- if or $rt.enabled $rt.secretName $rt.serverName -}}true{{- end -}}
{{- else if $rt -}}true{{- end -}}
{{- end -}}

{{/* Does redis.addrs name an address beyond loopback? ("true" or "") */}}
{{- define "spool.redisBeyondLoopback" -}}
{{- range .Values.redis.addrs -}}
{{- if not (regexMatch "^(localhost|127\\.[0-9.]+|\\[::1\\]):[0-9]+$" (toString .)) -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* The cluster's peer security: exactly one of cert-manager, an existing
     TLS Secret or the explicit opt-out. Checked last, so that other
     mistakes are named first. */}}
{{- define "spool.validatePeerSecurity" -}}
{{- if .Values.cluster.enabled -}}
{{- $t := .Values.cluster.tls -}}
{{- $set := list -}}
{{- if $t.certManager.issuerRef.name -}}{{- $set = append $set "cluster.tls.certManager.issuerRef" -}}{{- end -}}
{{- if $t.secretName -}}{{- $set = append $set "cluster.tls.secretName" -}}{{- end -}}
{{- if .Values.cluster.insecure -}}{{- $set = append $set "cluster.insecure" -}}{{- end -}}
{{- if not $set -}}
{{- fail "cluster.enabled needs mutual TLS between the nodes (spoold refuses to start a cluster node without it): set one of cluster.tls.certManager.issuerRef (cert-manager issues the nodes' certificate), cluster.tls.secretName (an existing Secret with tls.crt, tls.key and ca.crt) or cluster.insecure: true (no TLS: anything that reaches the peer port can read, join and change the cluster) (docs/kubernetes.md, \"Peer TLS and the join secret\")" -}}
{{- end -}}
{{- if gt (len $set) 1 -}}
{{- fail (printf "%s: set only one of cluster.tls.certManager.issuerRef, cluster.tls.secretName and cluster.insecure" (join " and " $set)) -}}
{{- end -}}
{{- if and .Values.cluster.insecure $t.peerURIPrefix -}}
{{- fail "cluster.tls.peerURIPrefix with cluster.insecure: identities come from certificates; set cluster.tls too, or drop peerURIPrefix" -}}
{{- end -}}
{{- if and $t.certManager.issuerRef.name (eq (toString .Values.cluster.storage) "off") (not $t.peerURIPrefix) -}}
{{- fail "cluster.storage \"off\" with cluster.tls.certManager: this release's certificate would name this release, and the storage nodes accept only their own identity; set cluster.tls.secretName to the storage nodes' Secret (<their fullname>-peer-tls), or give both releases a cluster.tls.peerURIPrefix that covers both" -}}
{{- end -}}
{{- if and $t.certManager.perPod (not $t.certManager.issuerRef.name) -}}
{{- fail "cluster.tls.certManager.perPod needs cluster.tls.certManager.issuerRef: the issuer that signs each pod's certificate (through cert-manager's csi-driver)" -}}
{{- end -}}
{{- if and $t.peerURIPrefix (not (hasPrefix "spiffe://" $t.peerURIPrefix)) -}}
{{- fail (printf "cluster.tls.peerURIPrefix %q: must be a spiffe:// URI (spiffe://<trust domain>/...)" $t.peerURIPrefix) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the nodes' certificate (tls.crt, tls.key, ca.crt):
     cert-manager's for this release, or cluster.tls.secretName; "" with
     cluster.insecure or without a cluster. */}}
{{- define "spool.peerTLSSecret" -}}
{{- if and .Values.cluster.enabled (not (include "spool.peerTLSPerPod" .)) -}}
{{- if .Values.cluster.tls.certManager.issuerRef.name -}}
{{- include "spool.fullname" . }}-peer-tls
{{- else -}}
{{- .Values.cluster.tls.secretName -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when each pod's certificate comes from cert-manager's
     csi-driver (cluster.tls.certManager.perPod). */}}
{{- define "spool.peerTLSPerPod" -}}
{{- if and .Values.cluster.enabled .Values.cluster.tls.certManager.issuerRef.name .Values.cluster.tls.certManager.perPod -}}true{{- end -}}
{{- end -}}

{{/* Whether spoold gets cluster.tls files at /etc/spool-tls: a Secret's
     or the csi-driver's. */}}
{{- define "spool.peerTLS" -}}
{{- if or (include "spool.peerTLSSecret" .) (include "spool.peerTLSPerPod" .) -}}true{{- end -}}
{{- end -}}

{{/* The identity (URI SAN) of the certificate cert-manager issues; with
     perPod, what each pod's identity is below. */}}
{{- define "spool.peerURI" -}}
{{- printf "spiffe://%s/ns/%s/spool/%s" .Values.cluster.tls.trustDomain .Release.Namespace .Release.Name -}}
{{- end -}}

{{/* The Secret holding the join secret (key "secret"):
     cluster.joinSecret.secretName, or for storage nodes the one the chart
     makes; "" for storage-off sidecars that name none (they are no members
     and never ask to join). */}}
{{- define "spool.joinSecret" -}}
{{- if .Values.cluster.enabled -}}
{{- if .Values.cluster.joinSecret.secretName -}}
{{- .Values.cluster.joinSecret.secretName -}}
{{- else if include "spool.storageOn" . -}}
{{- include "spool.fullname" . }}-join-secret
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Are the sidecars storage nodes of a cluster? ("true" or "") */}}
{{- define "spool.storageOn" -}}
{{- if and .Values.cluster.enabled (eq (toString .Values.cluster.storage) "on") -}}true{{- end -}}
{{- end -}}

{{/* Do the sidecars leave the cluster when they stop? Storage nodes of a
     Deployment: a replaced pod is a new node, so the one it replaces hands
     its replicas over and leaves (cluster.leave_on_shutdown). */}}
{{- define "spool.leaves" -}}
{{- if and (include "spool.storageOn" .) (eq .Values.mode "deployment") -}}true{{- end -}}
{{- end -}}

{{/* spool.seconds: a duration written as Go writes whole ones (1h, 30s,
     1m30s) in seconds. */}}
{{- define "spool.seconds" -}}
{{- $d := toString . -}}
{{- if or (eq $d "") (not (regexMatch "^([0-9]+h)?([0-9]+m)?([0-9]+s)?$" $d)) -}}
{{- fail (printf "duration %q: write whole hours, minutes and seconds, like 30s, 2m or 1m30s" $d) -}}
{{- end -}}
{{- $s := 0 -}}
{{- range (regexFindAll "[0-9]+[hms]" $d -1) -}}
{{- $unit := substr (int (sub (len .) 1)) (len .) . -}}
{{- $n := trimSuffix $unit . | atoi -}}
{{- $s = add $s (mul $n (get (dict "h" 3600 "m" 60 "s" 1) $unit)) -}}
{{- end -}}
{{- $s -}}
{{- end -}}

{{/* How long spoold's shutdown may take, in seconds: its drain, then (when
     it leaves) its departure. */}}
{{- define "spool.shutdownSeconds" -}}
{{- $s := int (include "spool.seconds" .Values.spoold.drainTimeout) -}}
{{- if include "spool.leaves" . -}}
{{- $s = add $s (int (include "spool.seconds" .Values.cluster.leaveTimeout)) -}}
{{- end -}}
{{- $s -}}
{{- end -}}

{{/* The pod's terminationGracePeriodSeconds: the value, or the app's
     shutdown, then spoold's, then 15 s for spoold to close its servers
     and for the kubelet's own steps. */}}
{{- define "spool.grace" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- add (int .Values.app.shutdownSeconds) (int (include "spool.shutdownSeconds" .)) 15 -}}
{{- else -}}
{{- int .Values.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{/* The DNS name of the peers Service with the cluster port: the one
     join entry that stands for every pod (cluster.join resolves it to each
     pod's address and skips the node's own). */}}
{{- define "spool.peersAddr" -}}
{{- printf "%s.%s.svc:7072" (include "spool.peers" .) .Release.Namespace -}}
{{- end -}}

{{/* Does this release bootstrap a cluster at pod 0? */}}
{{- define "spool.bootstraps" -}}
{{- if and .Values.cluster.enabled (eq .Values.mode "statefulset") (or (eq .Values.cluster.bootstrap "always") (and (eq .Values.cluster.bootstrap "auto") .Release.IsInstall)) -}}true{{- end -}}
{{- end -}}

{{/* How many per-pod config files a statefulset cluster gets. */}}
{{- define "spool.configCount" -}}
{{- max (int .Values.replicas) 1 -}}
{{- end -}}

{{/*
spool.config renders spool.yaml. Arguments: root (the chart context) and
join (the peers of this pod: a list of host:port).
*/}}
{{- define "spool.config" -}}
{{- $v := .root.Values -}}
{{- $node := dict "data_dir" "/var/lib/spool" "app_listen" (list "unix:///run/spool/app.sock") "admin_listen" "127.0.0.1:7071" "probe_listen" "0.0.0.0:7073" "drain_timeout" $v.spoold.drainTimeout -}}
{{- if $v.spoold.readyRequiresApp -}}{{- $_ := set $node "ready_requires_app" true -}}{{- end -}}
{{- $cfg := dict "node" $node -}}
{{- if $v.spoold.admin.tokensSecret -}}{{- $_ := set $cfg "admin" (dict "tokens_file" "/etc/spool-admin/tokens") -}}{{- end -}}
{{- if $v.cluster.enabled -}}
{{- $c := dict "replication_factor" $v.cluster.replicationFactor "dead_node_timeout" $v.cluster.deadNodeTimeout "finalize" $v.cluster.finalize "auto_finalize_after" $v.cluster.autoFinalizeAfter -}}
{{- if eq (toString $v.cluster.storage) "off" -}}
{{- $_ := set $c "storage" "off" -}}
{{- else -}}
{{- $_ := set $c "listen" "0.0.0.0:7072" -}}
{{- end -}}
{{- if .join -}}{{- $_ := set $c "join" .join -}}{{- end -}}
{{- if include "spool.leaves" .root -}}
{{- $_ := set $c "bootstrap_expect" (int $v.replicas) -}}
{{- $_ := set $c "leave_on_shutdown" true -}}
{{- $_ := set $c "leave_timeout" $v.cluster.leaveTimeout -}}
{{- end -}}
{{- if include "spool.peerTLS" .root -}}
{{- $t := dict "cert_file" "/etc/spool-tls/tls.crt" "key_file" "/etc/spool-tls/tls.key" "ca_file" "/etc/spool-tls/ca.crt" -}}
{{- if $v.cluster.tls.peerURIPrefix -}}{{- $_ := set $t "peer_uri_prefix" $v.cluster.tls.peerURIPrefix -}}
{{- else if include "spool.peerTLSPerPod" .root -}}{{- $_ := set $t "peer_uri_prefix" (printf "%s/" (include "spool.peerURI" .root)) -}}{{- end -}}
{{- $_ := set $c "tls" $t -}}
{{- else if $v.cluster.insecure -}}
{{- $_ := set $c "insecure" true -}}
{{- end -}}
{{- if include "spool.joinSecret" .root -}}
{{- $_ := set $c "join_secret_file" "/etc/spool-join/secret" -}}
{{- end -}}
{{- $_ := set $cfg "cluster" $c -}}
{{- end -}}
{{- if $v.redis.addrs -}}
{{- $r := dict "addrs" $v.redis.addrs -}}
{{- $rt := $v.redis.tls -}}
{{- if kindIs "map" $rt -}}
{{- $t := dict -}}
{{- if $rt.enabled -}}{{- $_ := set $t "enabled" true -}}{{- end -}}
{{- if $rt.secretName -}}
{{- $_ := set $t "ca_file" "/etc/spool-redis-tls/ca.crt" -}}
{{- $_ := set $t "cert_file" "/etc/spool-redis-tls/tls.crt" -}}
{{- $_ := set $t "key_file" "/etc/spool-redis-tls/tls.key" -}}
{{- end -}}
{{- if $rt.serverName -}}{{- $_ := set $t "server_name" $rt.serverName -}}{{- end -}}
{{- if $t -}}{{- $_ := set $r "tls" $t -}}{{- end -}}
{{- else if $rt -}}{{- $_ := set $r "tls" true -}}{{- end -}}
{{- if $v.redis.keyPrefix -}}{{- $_ := set $r "key_prefix" $v.redis.keyPrefix -}}{{- end -}}
{{- if $v.redis.username -}}{{- $_ := set $r "username" $v.redis.username -}}{{- end -}}
{{- if $v.redis.masterName -}}{{- $_ := set $r "master_name" $v.redis.masterName -}}{{- end -}}
{{- if $v.redis.db -}}{{- $_ := set $r "db" $v.redis.db -}}{{- end -}}
{{- $_ := set $cfg "redis" $r -}}
{{- if $v.redis.insecure -}}{{- $_ := set $cfg "guards" (dict "insecure_plaintext_remotes" true) -}}{{- end -}}
{{- end -}}
{{- $topics := list -}}
{{- range $v.topics -}}
{{- $topics = append $topics (merge (deepCopy .) $v.topicDefaults) -}}
{{- end -}}
{{- if $topics -}}{{- $_ := set $cfg "topics" $topics -}}{{- end -}}
{{- if $v.subscriptions -}}{{- $_ := set $cfg "subscriptions" $v.subscriptions -}}{{- end -}}
{{- toYaml (mergeOverwrite $cfg (deepCopy $v.spoolConfig)) -}}
{{- end -}}

{{/* The join list of statefulset pod $i: the pods before it (at most 3), or
     for pod 0 when it does not bootstrap, pods 1 and 2; then cluster.join. */}}
{{- define "spool.joinFor" -}}
{{- $root := .root -}}{{- $i := int .index -}}
{{- $peers := list -}}
{{- if eq $i 0 -}}
{{- if not (include "spool.bootstraps" $root) -}}
{{- range $j := until (int (min 3 (int $root.Values.replicas))) -}}
{{- if ne $j 0 -}}{{- $peers = append $peers (printf "%s-%d.%s:7072" (include "spool.fullname" $root) $j (include "spool.peers" $root)) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- range $j := until (int (min 3 $i)) -}}
{{- $peers = append $peers (printf "%s-%d.%s:7072" (include "spool.fullname" $root) $j (include "spool.peers" $root)) -}}
{{- end -}}
{{- end -}}
{{- toJson (concat $peers $root.Values.cluster.join) -}}
{{- end -}}

{{/* The spoold container. Argument: root; sidecar (true: a native sidecar). */}}
{{- define "spool.spoold" -}}
{{- $v := .root.Values -}}
- name: spoold
  image: "{{ $v.spoold.image.repository }}:{{ $v.spoold.image.tag }}"
  imagePullPolicy: {{ $v.spoold.image.pullPolicy }}
  {{- if .sidecar }}
  restartPolicy: Always
  {{- end }}
  args:
    {{- if and $v.cluster.enabled (eq $v.mode "statefulset") }}
    - --config=/etc/spool/node-$(POD_INDEX).yaml
    {{- else }}
    - --config=/etc/spool/spool.yaml
    {{- end }}
    - --log-level={{ $v.spoold.logLevel }}
    {{- range $v.spoold.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: SPOOL_NODE_ID
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    {{- if and $v.cluster.enabled (eq $v.mode "statefulset") }}
    - name: POD_INDEX
      valueFrom: {fieldRef: {fieldPath: "metadata.labels['apps.kubernetes.io/pod-index']"}}
    {{- end }}
    {{- if and $v.cluster.enabled (eq (toString $v.cluster.storage) "on") }}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    - name: SPOOL_CLUSTER_ADVERTISE
      value: $(POD_IP):7072
    {{- end }}
    {{- if $v.redis.existingSecret }}
    - name: SPOOL_REDIS_PASSWORD
      valueFrom: {secretKeyRef: {name: {{ $v.redis.existingSecret }}, key: {{ $v.redis.passwordKey }}}}
    {{- end }}
    {{- with $v.spoold.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    # The probe listener (probes, /metrics): AdminService stays on
    # 127.0.0.1:7071, for `kubectl exec ... spool` and port-forward.
    - {name: spool-probe, containerPort: 7073}
    {{- if and $v.cluster.enabled (eq (toString $v.cluster.storage) "on") }}
    - {name: spool-cluster, containerPort: 7072}
    {{- end }}
  startupProbe:
    httpGet: {path: /startupz, port: spool-probe}
    periodSeconds: 2
    failureThreshold: 90
  readinessProbe:
    httpGet: {path: /readyz, port: spool-probe}
    periodSeconds: 5
  livenessProbe:
    httpGet: {path: /healthz, port: spool-probe}
    periodSeconds: 10
    timeoutSeconds: 5
    failureThreshold: 3
  resources:
    {{- toYaml $v.spoold.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities: {drop: [ALL]}
    seccompProfile: {type: RuntimeDefault}
  volumeMounts:
    - {name: spool-config, mountPath: /etc/spool, readOnly: true}
    - {name: spool-socket, mountPath: /run/spool}
    - {name: spool-data, mountPath: /var/lib/spool}
    {{- if include "spool.peerTLS" .root }}
    - {name: spool-tls, mountPath: /etc/spool-tls, readOnly: true}
    {{- end }}
    {{- if include "spool.joinSecret" .root }}
    - {name: spool-join-secret, mountPath: /etc/spool-join, readOnly: true}
    {{- end }}
    {{- if include "spool.redisTLSSecret" .root }}
    - {name: spool-redis-tls, mountPath: /etc/spool-redis-tls, readOnly: true}
    {{- end }}
    {{- if $v.spoold.admin.tokensSecret }}
    - {name: spool-admin-tokens, mountPath: /etc/spool-admin, readOnly: true}
    {{- end }}
{{- end -}}

{{/* The Secret of redis.tls.secretName (ca.crt, tls.crt, tls.key), or
     nothing when redis.tls is a bool or names none. */}}
{{- define "spool.redisTLSSecret" -}}
{{- if and .Values.redis.addrs (kindIs "map" .Values.redis.tls) -}}{{- .Values.redis.tls.secretName -}}{{- end -}}
{{- end -}}

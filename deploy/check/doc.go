// Package check holds the checks of deploy/ that need heavy dependencies
// (Helm, the Prometheus rule and query parsers, Kubernetes API types): a
// module of its own, so that none of them enters the main module. `make
// test` runs it (cd deploy/check && go test ./...).
//
// What it proves, each against the real thing:
//   - the Helm chart renders with its default values and every file in
//     deploy/helm/spool/examples, on install and on upgrade;
//   - every rendered manifest, and every manifest under deploy/kubernetes,
//     deploy/injector and deploy/autoscaling, decodes strictly into the
//     k8s.io/api types (an unknown or misspelt field fails), and its pods
//     are coherent (mounts name volumes, probes name ports, spoold is a
//     native sidecar next to an app);
//   - spoold accepts the configuration each pod gives it: the container's
//     own args and environment, resolved against the mounted spool.yaml by
//     sidecar/config as spoold does;
//   - with that configuration: the pod's grace period covers spoold's
//     drain and, for nodes that leave the cluster as they stop, the leave;
//     spoold's probes are /startupz, /readyz and /healthz; pods that form
//     their cluster themselves (bootstrap_expect) expect as many pods as
//     the workload starts and join through a headless Service that selects
//     them and publishes not-ready addresses; no StatefulSet pod leaves
//     the cluster when it stops;
//   - peer security: every cluster pod runs its peer connections over
//     mutual TLS or says cluster.insecure, storage nodes hold a join secret,
//     and each of those files comes from the right key of a Secret the
//     container mounts; the chart refuses a cluster without peer TLS, asks
//     cert-manager for a certificate with the release's spiffe:// identity
//     and both usages, and keeps its join secret across upgrades;
//   - the ledger's Redis beyond the pod is reached over TLS unless the pod
//     says otherwise (spoold's own check, above); the chart refuses
//     redis.addrs without redis.tls or redis.insecure;
//   - the Prometheus rules parse with Prometheus's own rule parser, and the
//     rules, the Grafana dashboard and the autoscaling examples query only
//     metrics spoold registers (sidecar/metrics);
//   - the Dockerfile builds static binaries and runs them as a numeric
//     non-root user, and every pod that asks for runAsNonRoot names a
//     numeric runAsUser (the kubelet refuses a name it cannot check).
package check

//go:build e2e

package qemutests

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// Bounds of checkMetrics's waits.
const (
	metricsRolloutTimeout = 10 * time.Minute // metrics-server running, its APIService Available
	metricsFirstTimeout   = 5 * time.Minute  // every node's first figures (two scrapes)
	hpaScaleTimeout       = 8 * time.Minute  // the autoscaler's decision, either way
	metricsPollEvery      = 5 * time.Second
)

// The objects checkMetrics makes in default.
const hpaApp = "e2e-cpu"

// checkMetrics: the resource metrics API (metrics-server,
// docs/workloads.md) answers for every node and pod, and a
// HorizontalPodAutoscaler scales a Deployment on it: up to 2 under a
// bounded load (one busy loop held to 100m by its CPU limit, against a
// 20m request), back to 1 when the load stops. The load runs while its
// ConfigMap says so: stopping it leaves the pods in place, so the scale
// down waits on the metrics alone, not on a rollout. image runs busybox.
func checkMetrics(t *testing.T, ssh *sshClient, image string, nodes ...string) {
	t.Helper()
	if image == "" {
		return
	}
	if out, err := ssh.read("kubectl -n kube-system rollout status deployment/metrics-server --timeout=" + metricsRolloutTimeout.String() +
		" && kubectl wait --for=condition=Available --timeout=" + metricsRolloutTimeout.String() + " apiservice/v1beta1.metrics.k8s.io"); err != nil {
		desc, _ := ssh.read("kubectl get apiservice v1beta1.metrics.k8s.io -o yaml; kubectl -n kube-system logs deployment/metrics-server --tail=30")
		t.Errorf("metrics-server is not serving the metrics API: %v\n%s\n%s", err, out, desc)
		return
	}
	var top string
	for deadline := time.Now().Add(metricsFirstTimeout); ; time.Sleep(metricsPollEvery) {
		out, err := ssh.read("kubectl top nodes --no-headers")
		if err == nil && allNodesHaveFigures(out, nodes) {
			top = out
			break
		}
		if time.Now().After(deadline) {
			logs, _ := ssh.read("kubectl -n kube-system logs deployment/metrics-server --tail=30")
			t.Errorf("kubectl top nodes has no figures for every node (%s) within %s: %v\n%s\n%s", strings.Join(nodes, ", "), metricsFirstTimeout, err, out, logs)
			return
		}
	}
	t.Logf("kubectl top nodes:\n%s", top)
	if out, err := ssh.read("kubectl top pods -n kube-system --no-headers"); err != nil || !regexp.MustCompile(`(?m)^kube-apiserver-\S+\s+\d+m\s+\d+Mi`).MatchString(out) {
		t.Errorf("kubectl top pods has no figures for kube-apiserver: %v\n%s", err, out)
		return
	}

	manifest := `apiVersion: v1
kind: ConfigMap
metadata: {name: ` + hpaApp + `}
data:
  run: |
    yes
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ` + hpaApp + `}
spec:
  replicas: 1
  selector: {matchLabels: {app: ` + hpaApp + `}}
  template:
    metadata: {labels: {app: ` + hpaApp + `}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
        - name: load
          image: ` + image + `
          command: [busybox, sh, -c, 'while read -r run < /load/run && [ "$run" = yes ]; do :; done; exec busybox sleep 86400']
          volumeMounts: [{name: load, mountPath: /load}]
          resources:
            requests: {cpu: 20m}
            limits: {cpu: 100m}
      volumes: [{name: load, configMap: {name: ` + hpaApp + `}}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: ` + hpaApp + `}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: ` + hpaApp + `}
  minReplicas: 1
  maxReplicas: 2
  metrics:
    - type: Resource
      resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
  behavior:
    scaleDown: {stabilizationWindowSeconds: 0}
`
	defer func() {
		if out, err := ssh.read("kubectl delete hpa/" + hpaApp + " deployment/" + hpaApp + " configmap/" + hpaApp + " --ignore-not-found --wait=false"); err != nil {
			t.Errorf("cleaning up after the autoscaling check: %v\n%s", err, out)
		}
	}()
	if out, err := ssh.read("cat > /tmp/" + hpaApp + ".yaml <<'EOF'\n" + manifest + "EOF\nkubectl apply -f /tmp/" + hpaApp + ".yaml"); err != nil {
		t.Errorf("kubectl apply the autoscaling check's Deployment and HPA: %v\n%s", err, out)
		return
	}
	start := time.Now()
	if !waitReplicas(t, ssh, 2, hpaScaleTimeout) {
		return
	}
	up := time.Since(start)
	// The load stops: the kubelets update the ConfigMap's file in the
	// running pods, whose loops end.
	if out, err := ssh.read(`kubectl patch configmap ` + hpaApp + ` --type=merge -p '{"data":{"run":"no\n"}}'`); err != nil {
		t.Errorf("stop the load: %v\n%s", err, out)
		return
	}
	stop := time.Now()
	if !waitReplicas(t, ssh, 1, hpaScaleTimeout) {
		return
	}
	t.Logf("autoscaling on CPU: %s scaled 1 → 2 %.0f s after its start under load, 2 → 1 %.0f s after the load stopped", hpaApp, up.Seconds(), time.Since(stop).Seconds())
}

// allNodesHaveFigures says whether kubectl top nodes printed CPU and
// memory for every node.
func allNodesHaveFigures(out string, nodes []string) bool {
	for _, n := range nodes {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(n) + `\s+\d+m\s+\d+%\s+\d+Mi\s+\d+%`).MatchString(out) {
			return false
		}
	}
	return true
}

// waitReplicas waits for the HPA to set want replicas on the Deployment.
func waitReplicas(t *testing.T, ssh *sshClient, want int, timeout time.Duration) bool {
	t.Helper()
	w := []string{"", "1", "2"}[want]
	for deadline := time.Now().Add(timeout); ; time.Sleep(metricsPollEvery) {
		out, _ := ssh.read("kubectl get hpa " + hpaApp + " -o jsonpath='{.status.desiredReplicas}'")
		if strings.TrimSpace(out) == w {
			return true
		}
		if time.Now().After(deadline) {
			desc, _ := ssh.read("kubectl describe hpa " + hpaApp + "; kubectl top pods -l app=" + hpaApp)
			t.Errorf("the HPA did not scale %s to %d within %s:\n%s", hpaApp, want, timeout, desc)
			return false
		}
	}
}

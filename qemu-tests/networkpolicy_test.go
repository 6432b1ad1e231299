//go:build e2e

package qemutests

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// Bounds of checkNetworkPolicy's waits: the controller on every node, a
// pod's start, and a policy taking effect (or being lifted) on the nodes.
const (
	netpolRolloutTimeout = 10 * time.Minute
	netpolPodTimeout     = 5 * time.Minute
	netpolEffectTimeout  = 3 * time.Minute
	netpolPollEvery      = 2 * time.Second
)

// The objects checkNetworkPolicy makes in default, where the echo pod runs.
const (
	netpolClient = "e2e-netpol-client" // labelled e2e-netpol=client: the allowed one
	netpolOther  = "e2e-netpol-other"  // labelled e2e-netpol=other: never allowed
	netpolDeny   = "e2e-default-deny"
	netpolAllow  = "e2e-allow-client"
)

// checkNetworkPolicy: NetworkPolicy is enforced across nodes
// (kube-network-policies, docs/security.md). Two client pods on
// clientNode reach the echo pod (on the worker) by its address; a
// default-deny ingress policy in default blocks them; a policy that lets
// in the pods labelled e2e-netpol=client opens the echo pod to the first
// and not to the second. The pods and policies are deleted after.
//
// The clients run the flannel image, which every node has and which
// carries busybox; each probe is `busybox wget` with a 5 s timeout, and a
// blocked one is a timeout (the SYN dropped), never a refusal.
func checkNetworkPolicy(t *testing.T, ssh *sshClient, clientNode string) {
	t.Helper()
	if out, err := ssh.read("kubectl -n kube-system rollout status daemonset/kube-network-policies --timeout=" + netpolRolloutTimeout.String()); err != nil {
		t.Errorf("kube-network-policies does not run on every node: %v\n%s", err, out)
		return
	}
	image, err := ssh.read("kubectl -n kube-flannel get daemonset kube-flannel-ds -o jsonpath='{.spec.template.spec.containers[0].image}'")
	if image = strings.TrimSpace(image); err != nil || image == "" {
		t.Errorf("flannel's image (the clients' busybox): %v %q", err, image)
		return
	}
	defer func() {
		if out, err := ssh.read("kubectl delete networkpolicy " + netpolDeny + " " + netpolAllow + " --ignore-not-found && " +
			"kubectl delete pod " + netpolClient + " " + netpolOther + " --ignore-not-found --wait=false"); err != nil {
			t.Errorf("cleaning up after the NetworkPolicy check: %v\n%s", err, out)
		}
	}()
	pods := netpolClientPod(netpolClient, "client", clientNode, image) + "---\n" + netpolClientPod(netpolOther, "other", clientNode, image)
	if out, err := ssh.read("cat > /tmp/e2e-netpol-clients.yaml <<'EOF'\n" + pods + "EOF\nkubectl apply -f /tmp/e2e-netpol-clients.yaml && " +
		"kubectl wait --for=condition=Ready --timeout=" + netpolPodTimeout.String() + " pod/" + netpolClient + " pod/" + netpolOther); err != nil {
		t.Errorf("the NetworkPolicy check's client pods on %s: %v\n%s", clientNode, err, out)
		return
	}
	ip, err := ssh.read("kubectl get pod echo -o jsonpath='{.status.podIP}'")
	if ip = strings.TrimSpace(ip); err != nil || !regexp.MustCompile(`^\d+\.\d+\.\d+\.\d+$`).MatchString(ip) {
		t.Errorf("the echo pod's address: %v %q", err, ip)
		return
	}
	url := "http://" + ip + ":8080/"

	if !netpolWaitFor(t, ssh, netpolClient, url, probeReached, netpolEffectTimeout) {
		t.Errorf("without a policy, %s on %s does not reach the echo pod at %s", netpolClient, clientNode, url)
		return
	}
	if !netpolApply(t, ssh, netpolDeny, `spec:
  podSelector: {}
  policyTypes: [Ingress]
`) {
		return
	}
	if !netpolWaitFor(t, ssh, netpolClient, url, probeBlocked, netpolEffectTimeout) {
		t.Errorf("NetworkPolicy %s (default-deny ingress) did not block %s → echo pod within %s: NetworkPolicy is not enforced", netpolDeny, netpolClient, netpolEffectTimeout)
		return
	}
	if !netpolApply(t, ssh, netpolAllow, `spec:
  podSelector:
    matchLabels: {app: echo}
  policyTypes: [Ingress]
  ingress:
    - from:
        - podSelector:
            matchLabels: {e2e-netpol: client}
      ports:
        - {protocol: TCP, port: 8080}
`) {
		return
	}
	if !netpolWaitFor(t, ssh, netpolClient, url, probeReached, netpolEffectTimeout) {
		t.Errorf("NetworkPolicy %s did not let %s (e2e-netpol=client) reach the echo pod within %s", netpolAllow, netpolClient, netpolEffectTimeout)
		return
	}
	// The allowed client reaches the echo pod now, so the policies are
	// in effect on the worker: one probe says whether the other is kept out.
	if got, out := netpolProbe(ssh, netpolOther, url); got != probeBlocked {
		t.Errorf("%s (e2e-netpol=other) %s the echo pod, which only e2e-netpol=client may reach:\n%s", netpolOther, got, out)
		return
	}
	t.Logf("NetworkPolicy enforced across nodes: %s → echo pod (%s) blocked by %s, opened by %s; %s still blocked", netpolClient, ip, netpolDeny, netpolAllow, netpolOther)
}

// netpolClientPod is a client pod on node, labelled e2e-netpol=role,
// running busybox from image.
func netpolClientPod(name, role, node, image string) string {
	return `apiVersion: v1
kind: Pod
metadata: {name: ` + name + `, labels: {e2e-netpol: ` + role + `}}
spec:
  nodeName: ` + node + `
  tolerations: [{operator: Exists}]
  terminationGracePeriodSeconds: 1
  containers:
    - name: client
      image: ` + image + `
      command: [busybox, sleep, "3600"]
`
}

// netpolApply applies a NetworkPolicy named name in default with spec.
func netpolApply(t *testing.T, ssh *sshClient, name, spec string) bool {
	t.Helper()
	doc := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: " + name + "}\n" + spec
	// kubectl apply is idempotent: a loaded emulated API server that
	// times out a TLS handshake or kubectl's openapi download is asked
	// again, as ssh.retry does, before the check fails.
	var (
		out string
		err error
	)
	for try := range 5 {
		if out, err = ssh.read("cat > /tmp/" + name + ".yaml <<'EOF'\n" + doc + "EOF\nkubectl apply -f /tmp/" + name + ".yaml"); err == nil {
			return true
		}
		t.Logf("kubectl apply NetworkPolicy %s failed (%v), try %d of 5:\n%s", name, err, try+1, out)
		time.Sleep(time.Duration(try+1) * 5 * time.Second)
	}
	t.Errorf("kubectl apply NetworkPolicy %s: %v\n%s", name, err, out)
	return false
}

// probeResult is what one probe saw.
type probeResult int

const (
	// probeFailed: neither an answer nor a timeout (kubectl exec failed,
	// the connection was refused, ...): it says nothing about the policies.
	probeFailed probeResult = iota
	probeReached
	probeBlocked
)

func (c probeResult) String() string {
	switch c {
	case probeReached:
		return "reached"
	case probeBlocked:
		return "was blocked from"
	default:
		return "failed to probe"
	}
}

// netpolProbe connects from pod to url once.
func netpolProbe(ssh *sshClient, pod, url string) (probeResult, string) {
	out, err := ssh.read("kubectl exec " + pod + " -- busybox wget -q -T 5 -O - " + url)
	switch {
	case err == nil && strings.Contains(out, "echo"):
		return probeReached, out
	case err != nil && strings.Contains(out, "timed out"):
		return probeBlocked, out
	default:
		return probeFailed, out
	}
}

// netpolWaitFor probes from pod until a probe sees want or timeout
// passes, every netpolPollEvery at most; it logs the last probe's output
// when want never came.
func netpolWaitFor(t *testing.T, ssh *sshClient, pod, url string, want probeResult, timeout time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(netpolPollEvery)
	defer tick.Stop()
	for {
		got, out := netpolProbe(ssh, pod, url)
		if got == want {
			return true
		}
		if time.Now().After(deadline) {
			t.Logf("%s → %s: the last probe %s it:\n%s", pod, url, got, out)
			return false
		}
		<-tick.C
	}
}

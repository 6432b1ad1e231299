//go:build e2e

package qemutests

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The e2e cluster's LoadBalancer pool and the plant station's address on
// the cluster's link (docs/workloads.md).
const (
	lbPool      = "10.77.0.100-10.77.0.120"
	lbFirst     = "10.77.0.100"
	stationMAC  = "52:54:00:77:00:99"
	stationIP   = "10.77.0.99"
	lbService   = "echo-lb"
	lbWait      = 10 * time.Minute // MetalLB running and the address given
	lbAnswer    = 3 * time.Minute  // the address answering the station
	lbFailover  = 3 * time.Minute  // another node answering once one is gone
	lbAskEvery  = time.Second
	lbAskWithin = time.Second
)

// checkLoadBalancer: a Service of type LoadBalancer, backed by a
// Deployment with a pod on each node, gets the pool's first address;
// the plant station on the cluster's link asks who has it (ARP), one of
// the nodes answers, and a TCP connection to the address is accepted. It
// returns the node that answers.
func checkLoadBalancer(ctx context.Context, t *testing.T, ssh *sshClient, st *l2Station, nodes ...*clusterNode) *clusterNode {
	t.Helper()
	if out, err := ssh.read("kubectl -n metallb-system rollout status deployment/controller --timeout=" + lbWait.String() +
		" && kubectl -n metallb-system rollout status daemonset/speaker --timeout=" + lbWait.String()); err != nil {
		t.Errorf("MetalLB does not run: %v\n%s", err, out)
		return nil
	}
	manifest := `apiVersion: apps/v1
kind: Deployment
metadata: {name: ` + lbService + `}
spec:
  replicas: 2
  selector: {matchLabels: {app: ` + lbService + `}}
  template:
    metadata: {labels: {app: ` + lbService + `}}
    spec:
      terminationGracePeriodSeconds: 1
      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - {labelSelector: {matchLabels: {app: ` + lbService + `}}, topologyKey: kubernetes.io/hostname}
      containers:
        - name: echo
          image: quay.io/terrarium/sideloaded:1.0
          ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: ` + lbService + `}
spec:
  type: LoadBalancer
  selector: {app: ` + lbService + `}
  ports: [{port: 80, targetPort: 8080}]
`
	start := time.Now()
	ssh.retry("cat > /tmp/echo-lb.yaml <<'EOF'\n" + manifest + "EOF\nkubectl apply -f /tmp/echo-lb.yaml")
	var addr string
	for deadline := time.Now().Add(lbWait); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		out, err := ssh.read("kubectl get service " + lbService + ` -o jsonpath='{.status.loadBalancer.ingress[0].ip}'`)
		if addr = strings.TrimSpace(out); err == nil && addr != "" {
			break
		}
	}
	if addr != lbFirst {
		t.Errorf("Service %s's LoadBalancer address is %q; want the pool's first, %s\n%s", lbService, addr, lbFirst,
			ssh.output("kubectl get service "+lbService+" -o wide; kubectl -n metallb-system get pods -o wide; kubectl -n metallb-system logs deployment/controller --tail=20; echo --- end", regexp.MustCompile(`--- end`)))
		return nil
	}
	t.Logf("Service %s got %s %s after it was created", lbService, addr, time.Since(start).Round(time.Second))
	if out, err := ssh.read("kubectl rollout status deployment/" + lbService + " --timeout=" + lbWait.String()); err != nil {
		t.Errorf("the %s pods are not ready: %v\n%s", lbService, err, out)
		return nil
	}
	ip := netip.MustParseAddr(addr)
	n, mac, err := answering(ctx, st, ip, lbAnswer, nil, nodes)
	if err != nil {
		t.Errorf("the plant station: %v\n%s", err, ssh.output("kubectl -n metallb-system logs daemonset/speaker --all-containers --tail=30 --prefix; echo --- end", regexp.MustCompile(`--- end`)))
		return nil
	}
	t.Logf("the plant station: %s is at %s (%s), %s after the Service was created", ip, mac, n.name, time.Since(start).Round(time.Second))
	if err := connectWithin(ctx, st, mac, ip, lbAnswer); err != nil {
		t.Errorf("the plant station connects to %s:80: %v", ip, err)
		return nil
	}
	t.Logf("the plant station: %s:80 accepts a connection", ip)
	return n
}

// answering asks the segment who has ip every lbAskEvery until a node
// other than not answers, and returns it and its MAC.
func answering(ctx context.Context, st *l2Station, ip netip.Addr, within time.Duration, not *clusterNode, nodes []*clusterNode) (*clusterNode, net.HardwareAddr, error) {
	deadline := time.Now().Add(within)
	var last error
	for {
		mac, err := st.whoHas(ip, lbAskWithin)
		if err == nil {
			for _, n := range nodes {
				if n != not && strings.EqualFold(mac.String(), n.linkMAC) {
					return n, mac, nil
				}
			}
			last = errors.New("answered by " + mac.String())
		} else {
			last = err
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, nil, last
		}
		time.Sleep(lbAskEvery)
	}
}

// connectWithin tries a TCP connection to ip:80 through mac until one is
// accepted: kube-proxy may send a SYN to a pod that is gone.
func connectWithin(ctx context.Context, st *l2Station, mac net.HardwareAddr, ip netip.Addr, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := st.connect(ctx, mac, ip, 80, 2*time.Second)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(lbAskEvery)
	}
}

// checkLoadBalancerFailover: the node that answers for the address loses
// power; another node answers for it, and the address takes connections
// again. It logs how long each took. When no node takes over, the other
// nodes' speaker logs are read over SSH: the API server may have gone
// with the node that lost power.
func checkLoadBalancerFailover(ctx context.Context, t *testing.T, ssh *sshClient, key sshKey, st *l2Station, gone *clusterNode, nodes []*clusterNode) {
	t.Helper()
	ip := netip.MustParseAddr(lbFirst)
	if out, err := ssh.read("kubectl -n metallb-system get pods -o wide"); err == nil {
		t.Logf("before %s loses power:\n%s", gone.name, out)
	}
	cutPower(ctx, t, gone.vm)
	cut := time.Now()
	n, mac, err := answering(ctx, st, ip, lbFailover, gone, nodes)
	if err == nil {
		err = connectWithin(ctx, st, mac, ip, lbFailover)
	}
	if !assert.NoError(t, err, "after %s lost power, no other node took %s over within %s", gone.name, ip, lbFailover) {
		for _, o := range nodes {
			if o != gone {
				logSpeaker(ctx, t, o, key)
			}
		}
		return
	}
	t.Logf("failover: %s lost power; %s answered for %s and took a connection %s later",
		gone.name, n.name, ip, time.Since(cut).Round(100*time.Millisecond))
}

// logSpeaker logs the tail of each MetalLB speaker container's log on
// n, read from /var/log/pods (no API server needed).
func logSpeaker(ctx context.Context, t *testing.T, n *clusterNode, key sshKey) {
	t.Helper()
	c, err := trySSH(ctx, t, n.sshPort, key)
	if err != nil {
		t.Logf("%s: no SSH for the speaker's log: %v", n.name, err)
		return
	}
	out, err := c.sudoTry(`for f in /var/log/pods/metallb-system_speaker-*/speaker/*.log; do echo "== $f"; tail -n 60 "$f"; done`)
	t.Logf("%s: the speaker's log (%v):\n%s", n.name, err, out)
}

// arpSenders are the MACs of the ARP packets in a pcap capture that claim
// ip (its sender address): requests, replies and gratuitous ARP.
func arpSenders(t *testing.T, path string, ip netip.Addr) []string {
	t.Helper()
	var out []string
	for _, f := range pcapFrames(t, path) {
		if len(f) >= 42 && binary.BigEndian.Uint16(f[12:14]) == 0x0806 && netip.AddrFrom4([4]byte(f[28:32])) == ip {
			out = append(out, net.HardwareAddr(f[22:28]).String())
		}
	}
	return out
}

package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
)

// The delegate configuration made from a lease as flanneld writes it is
// one the real host-local plugin accepts, with the node's subnet as its
// range and the gateway flanneld announced inside it.
func TestDelegateConfFromFlanneldLease(t *testing.T) {
	env := filepath.Join(t.TempDir(), "subnet.env")
	if err := os.WriteFile(env, []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := readLease(env)
	if err != nil {
		t.Fatal(err)
	}
	c, err := loadConf([]byte(`{"cniVersion":"1.0.0","name":"cbr0","type":"flannel","delegate":{"hairpinMode":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	conf, err := delegateConf(c, l)
	if err != nil {
		t.Fatal(err)
	}
	ipam, _, err := allocator.LoadIPAMConfig(conf, "")
	if err != nil {
		t.Fatalf("host-local rejects the delegate configuration: %v\n%s", err, conf)
	}
	rs := ipam.Ranges
	if len(rs) != 1 || len(rs[0]) != 1 {
		t.Fatalf("ranges %+v, want one", rs)
	}
	r := rs[0][0]
	subnet := net.IPNet(r.Subnet)
	if got := subnet.String(); got != "10.244.1.0/24" {
		t.Errorf("range subnet %s, want 10.244.1.0/24", got)
	}
	if got := r.Gateway.String(); got != "10.244.1.1" {
		t.Errorf("range gateway %s, want flanneld's 10.244.1.1", got)
	}
	if len(ipam.Routes) != 1 || ipam.Routes[0].Dst.String() != "10.244.0.0/16" {
		t.Errorf("routes %+v, want the pod network 10.244.0.0/16", ipam.Routes)
	}
	if !strings.Contains(string(conf), `"mtu":1450`) || !strings.Contains(string(conf), `"ipMasq":false`) {
		t.Errorf("MTU or masquerading not taken from the lease: %s", conf)
	}
}

func TestReadLeaseRejectsBadSubnet(t *testing.T) {
	env := filepath.Join(t.TempDir(), "subnet.env")
	if err := os.WriteFile(env, []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readLease(env); err == nil || !strings.Contains(err.Error(), "FLANNEL_SUBNET") {
		t.Fatalf("err = %v, want one naming FLANNEL_SUBNET", err)
	}
}

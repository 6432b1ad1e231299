package addons

import (
	"encoding/json"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestFlannel(t *testing.T) {
	m, err := Flannel(FlannelInput{PodCIDR: "10.244.0.0/16", Image: "docker.io/flannel/flannel:v9", APIPort: 7445})
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(m)))
	var kinds []string
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			break
		}
		kinds = append(kinds, doc["kind"].(string))
	}
	if got := strings.Join(kinds, ","); got != "Namespace,ServiceAccount,ClusterRole,ClusterRoleBinding,ConfigMap,DaemonSet" {
		t.Errorf("documents: %s", got)
	}
	for _, want := range []string{`"Network": "10.244.0.0/16"`, "image: docker.io/flannel/flannel:v9", `value: "7445"`, `--iface=$(POD_IP)`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("manifest lacks %s", want)
		}
	}
	plain, _ := Flannel(FlannelInput{PodCIDR: "10.244.0.0/16"})
	if strings.Contains(string(plain), "KUBERNETES_SERVICE_HOST") || !strings.Contains(string(plain), DefaultFlannelImage) {
		t.Errorf("without a port flannel should use the Service, with the default image:\n%s", plain)
	}
	if _, err := Flannel(FlannelInput{PodCIDR: "10.244.0.0"}); err == nil {
		t.Error("a pod CIDR without a prefix length was accepted")
	}
	var conf map[string]any
	if err := json.Unmarshal([]byte(FlannelConflist), &conf); err != nil {
		t.Fatalf("conflist is not JSON: %v", err)
	}
}

// The Corefile serves the cluster domain and never forwards: no forward
// plugin (no upstream on an air-gapped node) and no loop plugin (which
// stopped CoreDNS when its pods' resolver was CoreDNS itself).
func TestCoreDNSConfig(t *testing.T) {
	b, err := CoreDNSConfig("cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Kind     string
		Metadata struct{ Name, Namespace string }
		Data     map[string]string
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, b)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata.Name != "coredns" || cm.Metadata.Namespace != "kube-system" {
		t.Errorf("kubeadm looks for ConfigMap kube-system/coredns, got %s %s/%s", cm.Kind, cm.Metadata.Namespace, cm.Metadata.Name)
	}
	corefile := cm.Data["Corefile"]
	for _, want := range []string{"kubernetes cluster.local in-addr.arpa ip6.arpa {", "ready\n", "health {", "disable success cluster.local"} {
		if !strings.Contains(corefile, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, corefile)
		}
	}
	for _, line := range strings.Split(corefile, "\n") {
		switch f := strings.Fields(line); {
		case len(f) > 0 && (f[0] == "forward" || f[0] == "loop"):
			t.Errorf("Corefile has %q", line)
		}
	}
	if strings.Count(corefile, "{") != strings.Count(corefile, "}") {
		t.Errorf("unbalanced braces:\n%s", corefile)
	}
	if _, err := CoreDNSConfig("a b"); err == nil {
		t.Error("a DNS domain with a space was accepted")
	}
}

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

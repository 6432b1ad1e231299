package machineconfig

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestExample(t *testing.T) {
	ex := Example()
	if err := ex.Validate(); err != nil {
		t.Fatalf("Example() is invalid: %v", err)
	}
	data, err := ex.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "testdata/example.golden", data)

	ex.Network.Interfaces[0].Name = "changed"
	ex.Hostname = "changed"
	if got := Example(); got.Hostname != "terrarium" || got.Network.Interfaces[0].Name != "en*" {
		t.Errorf("Example() shares state between calls: %+v", got)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	for name, cfg := range map[string]*Config{"example": Example(), "full": validConfig()} {
		t.Run(name, func(t *testing.T) {
			data, err := cfg.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			got, err := Parse("machine.yaml", data)
			if err != nil {
				t.Fatalf("Parse(Marshal()): %v\n%s", err, data)
			}
			if !reflect.DeepEqual(got, cfg) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, cfg)
			}
		})
	}
}

func TestDigestIsStable(t *testing.T) {
	// A change here means every deployed node sees its config as changed:
	// only accept it (with -update) when that is intended.
	golden(t, "testdata/example.digest", []byte(Example().Digest()+"\n"))
}

func TestDigestIgnoresFormatting(t *testing.T) {
	// The same config written differently: comments, key order, flow style,
	// quoting, an explicit default, an empty interfaces list.
	variants := []string{
		"apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n\n" +
			"network:\n  interfaces:\n    - name: en*\n      dhcp: true\n" +
			"admin:\n  sshAuthorizedKeys:\n    - " + testKey + "\n",
		"# comment\nkind: MachineConfig\napiVersion: \"terrarium.dev/v1alpha1\"\n" +
			"admin: {name: admin, sshAuthorizedKeys: ['" + testKey + "']}\n" +
			"network: {interfaces: [{dhcp: true, name: 'en*'}]}\nhostname: n # the name\n",
	}
	var digests []string
	for _, v := range variants {
		cfg, err := Parse("machine.yaml", []byte(v))
		if err != nil {
			t.Fatalf("Parse: %v\n%s", err, v)
		}
		digests = append(digests, cfg.Digest())
	}
	if digests[0] != digests[1] {
		t.Errorf("digests differ for equivalent configs: %v", digests)
	}
	if !strings.HasPrefix(digests[0], "sha256:") || len(digests[0]) != len("sha256:")+64 {
		t.Errorf("digest %q is not sha256:<64 hex digits>", digests[0])
	}

	empty, err := Parse("machine.yaml", []byte("apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n\nnetwork: {interfaces: []}\n"))
	if err != nil {
		t.Fatal(err)
	}
	absent := &Config{APIVersion: APIVersion, Kind: Kind, Hostname: "n"}
	if empty.Digest() != absent.Digest() {
		t.Error("an empty interfaces list and no network give different digests")
	}
}

func TestDigestChangesWithContent(t *testing.T) {
	a, b := Example(), Example()
	b.Network.Interfaces[0].DNS = []string{"10.0.0.1"}
	if a.Digest() == b.Digest() {
		t.Error("adding a DNS server did not change the digest")
	}
	b = Example()
	b.Hostname = "other"
	if a.Digest() == b.Digest() {
		t.Error("changing the hostname did not change the digest")
	}
}

func TestExampleGoldenParses(t *testing.T) {
	data, err := os.ReadFile("testdata/example.golden")
	if err != nil {
		t.Fatalf("read golden: %v", err)
	}
	if _, err := Parse("example.yaml", data); err != nil {
		t.Errorf("testdata/example.golden does not parse: %v", err)
	}
}

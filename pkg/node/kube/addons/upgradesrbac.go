package addons

import (
	"bytes"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
)

// The objects of the upgrades' RBAC, in YAML as the manifests give them.
type (
	objectMeta struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	}
	configMapObject struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
	}
	policyRule struct {
		APIGroups     []string `yaml:"apiGroups,flow"`
		Resources     []string `yaml:"resources,flow"`
		ResourceNames []string `yaml:"resourceNames,flow"`
		Verbs         []string `yaml:"verbs,flow"`
	}
	roleObject struct {
		APIVersion string       `yaml:"apiVersion"`
		Kind       string       `yaml:"kind"`
		Metadata   objectMeta   `yaml:"metadata"`
		Rules      []policyRule `yaml:"rules"`
	}
	roleRef struct {
		APIGroup string `yaml:"apiGroup"`
		Kind     string `yaml:"kind"`
		Name     string `yaml:"name"`
	}
	subject struct {
		APIGroup string `yaml:"apiGroup"`
		Kind     string `yaml:"kind"`
		Name     string `yaml:"name"`
	}
	roleBindingObject struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
		RoleRef    roleRef    `yaml:"roleRef"`
		// Subjects has no omitempty: an empty list, applied, takes the
		// subjects an earlier apply gave away.
		Subjects []subject `yaml:"subjects"`
	}
)

const rbacGroup = "rbac.authorization.k8s.io"

// LegacyUpgradesName names the Role and RoleBinding of
// LegacyUpgradeGrant.
const LegacyUpgradesName = "terrarium:node-upgrades-legacy"

// NodeUpgradeStatusName names the Role and RoleBinding that let node
// write its own status object.
func NodeUpgradeStatusName(node string) string { return "terrarium:upgrade-status:" + node }

// NodeUser is the user a node's kubelet credential is (the Node
// authorizer's system:node:<name>).
func NodeUser(node string) string { return "system:node:" + node }

// NodeUpgradeStatus renders what a control plane applies, as the
// cluster's admin, for each node it sees: the node's status object
// (rollout.StatusName), created empty (a node may not create it: a
// create names no object, so no resourceNames rule grants it), and a Role
// and RoleBinding that let user system:node:<node> get and update that
// one object, by resourceNames: no other node's, not the record, no
// list, no delete.
func NodeUpgradeStatus(nodes []string) ([]byte, error) {
	var docs []any
	for _, n := range nodes {
		if err := checkNodeName(n); err != nil {
			return nil, err
		}
		name := NodeUpgradeStatusName(n)
		docs = append(docs,
			configMapObject{APIVersion: "v1", Kind: "ConfigMap", Metadata: objectMeta{Name: rollout.StatusName(n), Namespace: rollout.Namespace}},
			roleObject{APIVersion: rbacGroup + "/v1", Kind: "Role", Metadata: objectMeta{Name: name, Namespace: rollout.Namespace},
				Rules: []policyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{rollout.StatusName(n)}, Verbs: []string{"get", "update"}}}},
			roleBindingObject{APIVersion: rbacGroup + "/v1", Kind: "RoleBinding", Metadata: objectMeta{Name: name, Namespace: rollout.Namespace},
				RoleRef: roleRef{APIGroup: rbacGroup, Kind: "Role", Name: name}, Subjects: []subject{{APIGroup: rbacGroup, Kind: "User", Name: NodeUser(n)}}},
		)
	}
	return render("each node's upgrade status object and its right to write it alone (NodeUpgradeStatus)", docs)
}

// LegacyUpgradeGrant renders the one exception to "no node writes the
// record", for a node of a release before signed rollouts, which records
// its phases in the record itself and locks its turn in the lock's
// ConfigMap (rollout.LockName): for its turn alone (rollout.Record.
// LegacyTurn), user system:node:<node> may get and update those two
// objects. node "" binds no one: what a control plane applies once no
// such node has the turn.
func LegacyUpgradeGrant(node string) ([]byte, error) {
	subjects := []subject{}
	if node != "" {
		if err := checkNodeName(node); err != nil {
			return nil, err
		}
		subjects = append(subjects, subject{APIGroup: rbacGroup, Kind: "User", Name: NodeUser(node)})
	}
	docs := []any{
		configMapObject{APIVersion: "v1", Kind: "ConfigMap", Metadata: objectMeta{Name: rollout.LockName, Namespace: rollout.Namespace}},
		roleObject{APIVersion: rbacGroup + "/v1", Kind: "Role", Metadata: objectMeta{Name: LegacyUpgradesName, Namespace: rollout.Namespace},
			Rules: []policyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{rollout.ConfigMapName, rollout.LockName}, Verbs: []string{"get", "update"}}}},
		roleBindingObject{APIVersion: rbacGroup + "/v1", Kind: "RoleBinding", Metadata: objectMeta{Name: LegacyUpgradesName, Namespace: rollout.Namespace},
			RoleRef: roleRef{APIGroup: rbacGroup, Kind: "Role", Name: LegacyUpgradesName}, Subjects: subjects},
	}
	return render("the record's write for the turn of a node of an older release (LegacyUpgradeGrant)", docs)
}

// checkNodeName refuses what is no Node name (a DNS-1123 subdomain): a
// name that would make another object's name or another user.
func checkNodeName(n string) error {
	ok := n != "" && len(n) <= 253 && strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789-.") == "" &&
		!strings.ContainsAny(n[:1]+n[len(n)-1:], "-.")
	if !ok {
		return fmt.Errorf("upgrade RBAC: %q is not a node name", n)
	}
	return nil
}

// render writes docs as one manifest, headed by what it is.
func render(what string, docs []any) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by Terrarium firstboot: %s.\n", what)
	for _, d := range docs {
		b.WriteString("---\n")
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(d); err != nil {
			return nil, fmt.Errorf("render %s: %w", what, err)
		}
		if err := enc.Close(); err != nil {
			return nil, fmt.Errorf("render %s: %w", what, err)
		}
	}
	return b.Bytes(), nil
}

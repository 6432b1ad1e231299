package cloudinit

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// cloudConfigTakes lists what a #cloud-config may hold, for errors.
const cloudConfigTakes = "hostname, fqdn, users[].name, users[].ssh_authorized_keys, ssh_authorized_keys"

// cloudConfig is what Terrarium takes from a #cloud-config document.
type cloudConfig struct {
	// hostname is hostname's, or else fqdn's, first label; "" when unset.
	hostname string
	// admin is the admin's name, "" when no user entry names one.
	admin string
	// keys are the admin's keys: its own, then the top-level ones.
	keys []string
}

// user is one entry of users.
type user struct {
	path, name string
	keys       []string
}

// parseCloudConfig reads a #cloud-config document (the header is a YAML
// comment). Every key it does not take is named in one error.
func parseCloudConfig(data []byte) (cloudConfig, error) {
	d := doc{what: "cloud-config"}
	root, err := parseYAML(d.what, data)
	if err != nil || root == nil {
		return cloudConfig{}, err
	}
	var c cloudConfig
	var fqdn string
	var users []user
	var topKeys []string
	for _, e := range d.mapping(root, "") {
		switch e.key {
		case "hostname":
			c.hostname = firstLabel(d.str(e.val, e.path))
		case "fqdn":
			fqdn = firstLabel(d.str(e.val, e.path))
		case "users":
			users = d.users(e.val, e.path)
		case "ssh_authorized_keys":
			topKeys = d.strs(e.val, e.path)
		default:
			d.unsupportedf("%s", e.key)
		}
	}
	if c.hostname == "" {
		c.hostname = fqdn
	}
	admin, err := chooseAdmin(users)
	if err := d.err(cloudConfigTakes, "; put the rest in a Terrarium machine config"); err != nil {
		return cloudConfig{}, err
	}
	if err != nil {
		return cloudConfig{}, err
	}
	c.admin = admin.name
	c.keys = append(admin.keys, topKeys...)
	return c, nil
}

// users reads the users list. An entry is a name or a mapping with name
// and ssh_authorized_keys; "default" (cloud-init's distribution user) is
// skipped.
func (d *doc) users(n *yaml.Node, path string) []user {
	var out []user
	for i, item := range d.list(n, path) {
		u := user{path: index(path, i)}
		if item.Kind == yaml.ScalarNode {
			u.name = d.str(item, u.path)
		} else {
			for _, e := range d.mapping(item, u.path) {
				switch e.key {
				case "name":
					u.name = d.str(e.val, e.path)
				case "ssh_authorized_keys":
					u.keys = d.strs(e.val, e.path)
				default:
					d.unsupportedf("%s", e.path)
				}
			}
		}
		switch {
		case u.name == "":
			d.badf(item, u.path, "has no name")
		case u.name != "default":
			out = append(out, u)
		}
	}
	return out
}

// chooseAdmin picks Terrarium's one admin among the users: the first that
// has keys, or else the first. Other users without keys are dropped
// (Terrarium allows no password logins, so they could not log in); a
// second user with keys is refused, as its keys would be lost.
func chooseAdmin(users []user) (user, error) {
	var first, withKeys *user
	for i := range users {
		u := &users[i]
		if first == nil {
			first = u
		}
		if len(u.keys) == 0 {
			continue
		}
		if withKeys != nil {
			return user{}, fmt.Errorf("cloud-config: %s (%s) has keys, but %s (%s) already does: %w "+
				"(Terrarium has one admin user; list every key under %s)",
				u.path, u.name, withKeys.path, withKeys.name, ErrUnsupported, withKeys.name)
		}
		withKeys = u
	}
	switch {
	case withKeys != nil:
		return *withKeys, nil
	case first != nil:
		return *first, nil
	}
	return user{}, nil
}

// firstLabel returns a host name's first DNS label ("node-1" of
// "node-1.example.com").
func firstLabel(name string) string {
	label, _, _ := strings.Cut(name, ".")
	return label
}

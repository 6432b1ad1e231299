// Package clustersecrets creates, stores, loads and checks the secrets a
// Terrarium cluster is formed with.
//
// Terrarium's appliance images form a kubeadm-driven Kubernetes cluster
// offline, with every node booting at the same time. kubeadm normally makes
// the cluster CA on the first control-plane node and hands out its hash and a
// bootstrap token afterwards; Terrarium instead makes them once on the build
// host (`imagebuild config cluster`), so that each node's kubeadm config can
// carry the discovery CA hash, the bootstrap token and the certificate key in
// advance, and the control-plane nodes can be seeded with the CAs under
// /etc/kubernetes/pki (see Secrets.Files).
//
// The secrets are kept in one YAML file (apiVersion terrarium.dev/v1alpha1,
// kind ClusterSecrets) written by Save with mode 0600 and read back by Load.
// Anyone who holds the file can administer the cluster and join machines to
// it, and sign changes of its nodes' configs.
//
// The config signing key (signingKey, ed25519) was added to the format
// later. A file without it still loads, and Validate accepts its absence;
// EnsureSigningKey adds a new key, and `imagebuild config cluster` does so
// and saves the file on its next run, saying that it did. Nodes enrolled
// with configs from before then trust no key, so their configs can only
// change by re-enrolling them (`firstboot reset`).
//
// The secrets encryption key (secretsEncryptionKey: 32 bytes, base64),
// with which the control planes encrypt Secrets in etcd, came later still
// and is handled the same way: a file without it loads,
// EnsureSecretsEncryptionKey adds one, and `imagebuild config cluster`
// saves it. Only configs made after that carry it.
//
// Checking is split by whether it depends on the clock:
//
//   - Secrets.Validate checks the document itself: kind and apiVersion, that
//     every PEM parses, that every key matches its certificate, that the CAs
//     are CAs, and the formats of the bootstrap token and certificate key.
//     Load and Save run it.
//   - Secrets.CheckExpiry checks against a given time: that the CAs are valid
//     and the bootstrap token has not expired. Load does not run it; the
//     caller decides whether an expired token matters (rendering configs for
//     new nodes) or not (reading the CA hash).
//   - Secrets.Check runs both and reports every problem at once.
//
// Problems are reported as a strictyaml.Problems, one per line, each naming
// the field by its path in the document, such as $.etcdCA.key.
package clustersecrets

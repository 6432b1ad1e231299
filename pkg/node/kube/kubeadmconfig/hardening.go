package kubeadmconfig

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// The audit log's rotation (kube-apiserver's --audit-log-* flags), the
// CIS benchmark's values (1.2.17 to 1.2.19): at most AuditLogMaxBackups
// rotated files of AuditLogMaxSizeMB each, gzipped (a tenth of that
// each), none older than AuditLogMaxAgeDays, so that it can never fill
// TERRA-STATE: about 200 MB at most.
const (
	AuditLogMaxAgeDays = 30
	AuditLogMaxBackups = 10
	AuditLogMaxSizeMB  = 100
)

// Events any one API server accepts, all clients together, before it
// answers 429 (admission plugin EventRateLimit, the CIS benchmark's
// 1.2.9): a node's kubelet records at most 5 a second (eventRecordQPS),
// so that a plant's cluster stays well under it, and a crash-looping
// flood cannot fill etcd.
const (
	EventRateLimitQPS   = 50
	EventRateLimitBurst = 200
)

// TerminatedPodGCThreshold is how many finished pods the controller
// manager keeps before it deletes the oldest (the CIS benchmark's 1.3.1;
// Kubernetes keeps 12,500, which a small control plane's etcd and memory
// should not carry).
const TerminatedPodGCThreshold = 1000

// TLSCipherSuites are the only suites the API server and the kubelets
// offer for TLS 1.2 (TLS 1.3 has its own, all strong): ECDHE for forward
// secrecy with AEAD ciphers only. ECDSA for the API server's and the
// kubelets' serving certificates (ECDSA P-256, see EncryptionAlgorithm;
// a kubelet's key for its serving certificate is ECDSA P-256 too), RSA
// for a kubelet that serves a certificate it made itself (RSA 2048: one
// formed by an earlier release).
const TLSCipherSuites = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384," +
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256," +
	"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"

// TLSMinVersion is the oldest TLS the API server and the kubelets speak.
const TLSMinVersion = "VersionTLS12"

// KubeletCertificateAuthority is the CA kube-apiserver checks kubelets'
// serving certificates with: the cluster CA, which signs them.
const KubeletCertificateAuthority = layout.KubernetesPKIDir + "/ca.crt"

// Sysctl is one of the kernel's settings: its name as sysctl.d(5)
// writes it, and its value.
type Sysctl struct{ Name, Value string }

// KernelDefaults are the kernel's settings the kubelet checks when it
// starts (setupKernelTunables in pkg/kubelet/cm/container_manager_linux.go
// and the values of k8s.io/component-helpers/node/util/sysctl, unchanged
// through v1.36): with protectKernelDefaults it refuses to start on a
// kernel whose value differs, instead of changing the kernel behind the
// image's back. The image sets every one (os/overlay's sysctl.d; a test
// reads the files): memory overcommitted (the kubelet's own accounting
// decides), the OOM killer instead of a panic, a panic on an oops and a
// reboot 10 s after it, and root's key quotas large enough for a key
// ring per container.
func KernelDefaults() []Sysctl {
	return []Sysctl{
		{"vm.overcommit_memory", "1"},
		{"vm.panic_on_oom", "0"},
		{"kernel.panic", "10"},
		{"kernel.panic_on_oops", "1"},
		{"kernel.keys.root_maxkeys", "1000000"},
		{"kernel.keys.root_maxbytes", "25000000"},
	}
}

// PodSecurityExemptNamespaces are the namespaces Pod Security admission
// leaves alone: the add-ons' own, whose pods need the host (kube-proxy,
// flannel, the static pods' mirrors).
func PodSecurityExemptNamespaces() []string { return []string{"kube-system", "kube-flannel"} }

// arg is one kube-apiserver, controller manager or scheduler flag, as
// kubeadm's extraArgs list it.
type arg struct{ name, value string }

// volume is one of kubeadm's extraVolumes: a host path in the static pod.
type volume struct {
	name, path, pathType string
	readOnly             bool
}

// apiServerArgs are kube-apiserver's flags beyond kubeadm's defaults
// (docs/security.md); encrypt adds the EncryptionConfiguration.
func apiServerArgs(encrypt bool) []arg {
	args := []arg{
		{"admission-control-config-file", layout.AdmissionConfigFile},
		// NodeRestriction is kubeadm's default already, said here so that
		// no later change of kubeadm's drops it unnoticed; EventRateLimit
		// with AdmissionConfig's limits; DenyServiceExternalIPs: a
		// Service's spec.externalIPs could take over any address on the
		// plant network (LoadBalancer addresses come from the cluster's
		// own pool instead).
		{"enable-admission-plugins", "NodeRestriction,EventRateLimit,DenyServiceExternalIPs"},
		{"audit-policy-file", layout.AuditPolicyFile},
		{"audit-log-path", layout.AuditLogFile},
		{"audit-log-maxage", fmt.Sprint(AuditLogMaxAgeDays)},
		{"audit-log-maxbackup", fmt.Sprint(AuditLogMaxBackups)},
		{"audit-log-maxsize", fmt.Sprint(AuditLogMaxSizeMB)},
		{"audit-log-compress", "true"},
	}
	if encrypt {
		args = append(args, arg{"encryption-provider-config", layout.EncryptionConfigFile})
	}
	return append(args,
		// The kubelets' serving certificates are the cluster CA's
		// (serverTLSBootstrap, approved by csrsigner for each node's own
		// names): logs, exec and port-forward reach a kubelet only if its
		// certificate is. kubeadm mounts the PKI directory already.
		arg{"kubelet-certificate-authority", KubeletCertificateAuthority},
		arg{"profiling", "false"},
		// A service-account token lives as long as it says (an hour for
		// a pod's), not a year as kube-apiserver grants by default for
		// clients that never reread their token.
		arg{"service-account-extend-token-expiration", "false"},
		arg{"service-account-lookup", "true"},
		arg{"tls-cipher-suites", TLSCipherSuites},
		arg{"tls-min-version", TLSMinVersion},
	)
}

// apiServerVolumes are the host paths apiServerArgs name.
func apiServerVolumes(encrypt bool) []volume {
	vs := []volume{
		{"admission-config", layout.AdmissionConfigFile, "File", true},
		{"audit-policy", layout.AuditPolicyFile, "File", true},
		{"audit-log", layout.AuditLogDir, "DirectoryOrCreate", false},
	}
	if encrypt {
		vs = append(vs, volume{"encryption-config", layout.EncryptionConfigFile, "File", true})
	}
	return vs
}

// leaderElectionArgs are LeaderElectionArgs as a list.
func leaderElectionArgs() []arg {
	return []arg{{"leader-elect-lease-duration", "60s"}, {"leader-elect-renew-deadline", "40s"}, {"leader-elect-retry-period", "10s"}}
}

// controllerArgs are the controller manager's and the scheduler's flags:
// their leader election (LeaderElectionArgs), no profiling endpoint, and
// their ports on loopback only (kubeadm's default, said here).
func controllerArgs() []arg {
	return append(leaderElectionArgs(), arg{"profiling", "false"}, arg{"bind-address", "127.0.0.1"})
}

// controllerManagerArgs are the controller manager's: controllerArgs, and
// how many finished pods it keeps.
func controllerManagerArgs() []arg {
	return append(controllerArgs(), arg{"terminated-pod-gc-threshold", fmt.Sprint(TerminatedPodGCThreshold)})
}

// argsYAML renders args as kubeadm's extraArgs, one flag a line under
// indent.
func argsYAML(indent string, args []arg) string {
	var b strings.Builder
	for _, a := range args {
		fmt.Fprintf(&b, "%s- {name: %s, value: %q}\n", indent, a.name, a.value)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// volumesYAML renders vs as kubeadm's extraVolumes, the host path mounted
// at the same path in the pod.
func volumesYAML(indent string, vs []volume) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "%s- {name: %s, hostPath: %s, mountPath: %s, readOnly: %t, pathType: %s}\n", indent, v.name, v.path, v.path, v.readOnly, v.pathType)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// ControlPlaneFiles are the files a control plane's kube-apiserver reads
// (layout.AuditPolicyFile, AdmissionConfigFile, and EncryptionConfigFile
// when the cluster config holds a key, at EncryptionPrepare), by path.
// Firstboot writes them, root's alone, before kubeadm runs.
func ControlPlaneFiles(c *machineconfig.Cluster) (map[string][]byte, error) {
	files := map[string][]byte{
		layout.AuditPolicyFile:     []byte(auditPolicy),
		layout.AdmissionConfigFile: AdmissionConfig(c.PodSecurityLevels()),
	}
	if c.SecretsEncryptionKey != "" {
		enc, err := EncryptionConfig(c, EncryptionPrepare)
		if err != nil {
			return nil, err
		}
		files[layout.EncryptionConfigFile] = enc
	}
	return files, nil
}

// EncryptionStage is how far a control plane's kube-apiserver has moved
// to the cluster's current secrets encryption key (a rotation's steps, in
// the Kubernetes documentation's order: every API server reads the new
// key before any writes with it, and the old keys go only once every
// Secret is written again with the new one).
type EncryptionStage int

const (
	// EncryptionPrepare writes with the newest retired key — the key
	// every control plane wrote with before the rotation — and reads with
	// every key: safe whatever the other control planes do. Without a
	// retired key it is EncryptionWrite.
	EncryptionPrepare EncryptionStage = iota
	// EncryptionWrite writes with the current key and reads with every
	// key: once every control plane reads the current key.
	EncryptionWrite
	// EncryptionDone writes and reads with the current key alone: once
	// every Secret is written again with it.
	EncryptionDone
)

func (s EncryptionStage) String() string {
	switch s {
	case EncryptionPrepare:
		return "prepare"
	case EncryptionWrite:
		return "write"
	case EncryptionDone:
		return "done"
	}
	return fmt.Sprintf("EncryptionStage(%d)", int(s))
}

// EncryptionConfig is the EncryptionConfiguration of Secrets at stage st
// of c's keys (32 bytes, base64 each): secretbox (XSalsa20-Poly1305;
// aescbc is weaker, KMS needs a service this cluster has none of) with
// the key written with first, then the others the stage reads with, then
// identity, so that Secrets stored before the cluster had a key (a
// restore from an older backup) stay readable until rewritten. Each key's
// name is derived from it (EncryptionKeyName).
func EncryptionConfig(c *machineconfig.Cluster, st EncryptionStage) ([]byte, error) {
	keys := []string{c.SecretsEncryptionKey}
	switch retired := c.RetiredSecretsEncryptionKeys; {
	case st == EncryptionDone:
	case st == EncryptionPrepare && len(retired) > 0:
		keys = slices.Concat(retired[:1], keys, retired[1:])
	default:
		keys = append(keys, retired...)
	}
	var b strings.Builder
	b.WriteString(`# Written by Terrarium firstboot from the machine config; kube-apiserver reads it.
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - secretbox:
          keys:
`)
	for _, k := range keys {
		name, err := EncryptionKeyName(k)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "            - name: %s\n              secret: %s\n", name, k)
	}
	b.WriteString("      - identity: {}\n")
	return []byte(b.String()), nil
}

// EncryptionKeyName is the name of a secrets encryption key in the
// EncryptionConfiguration: key-<8 hex digits of its SHA-256>. etcd's
// values name it (k8s:enc:secretbox:v1:key-…:), and so do the console and
// the cluster's record of a rotation; the key itself never shows.
func EncryptionKeyName(key string) (string, error) {
	b, err := base64.StdEncoding.Strict().DecodeString(key)
	if err != nil || len(b) != machineconfig.SecretsEncryptionKeyBytes {
		return "", fmt.Errorf("the secrets encryption key is not %d bytes of base64", machineconfig.SecretsEncryptionKeyBytes)
	}
	sum := sha256.Sum256(b)
	return "key-" + hex.EncodeToString(sum[:4]), nil
}

// EncryptionStageOf is the stage of c's keys whose configuration is data,
// and false when data is none of them (written for other keys, or not by
// EncryptionConfig). Without retired keys every stage's configuration is
// the same, and the stage is EncryptionDone.
func EncryptionStageOf(c *machineconfig.Cluster, data []byte) (EncryptionStage, bool) {
	for st := EncryptionDone; st >= EncryptionPrepare; st-- {
		want, err := EncryptionConfig(c, st)
		if err == nil && bytes.Equal(want, data) {
			return st, true
		}
	}
	return 0, false
}

// AdmissionConfig is the AdmissionConfiguration of Pod Security admission
// at the levels ps (the latest version of each), the add-ons' namespaces
// exempt, and of EventRateLimit.
func AdmissionConfig(ps machineconfig.PodSecurity) []byte {
	return []byte(`# Written by Terrarium firstboot from the machine config; kube-apiserver reads it.
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: PodSecurity
    configuration:
      apiVersion: pod-security.admission.config.k8s.io/v1
      kind: PodSecurityConfiguration
      defaults:
        enforce: "` + ps.Enforce + `"
        enforce-version: latest
        audit: "` + ps.Audit + `"
        audit-version: latest
        warn: "` + ps.Warn + `"
        warn-version: latest
      exemptions:
        usernames: []
        runtimeClasses: []
        namespaces: [` + strings.Join(PodSecurityExemptNamespaces(), ", ") + `]
  - name: EventRateLimit
    configuration:
      apiVersion: eventratelimit.admission.k8s.io/v1alpha1
      kind: Configuration
      limits:
        - type: Server
          qps: ` + fmt.Sprint(EventRateLimitQPS) + `
          burst: ` + fmt.Sprint(EventRateLimitBurst) + `
`)
}

// auditPolicy records who did what, never what they wrote or read.
// Metadata is the most it records: RequestResponse (or Request) would
// keep every object written, and encoding them costs kube-apiserver CPU
// that an emulated or small control plane does not have; the first
// matching rule decides.
const auditPolicy = `# Written by Terrarium firstboot; kube-apiserver reads it (docs/security.md).
apiVersion: audit.k8s.io/v1
kind: Policy
# Each request once, when its answer is known.
omitStages: [RequestReceived]
rules:
  # Secrets, ConfigMaps and tokens: who touched which, never their bodies.
  - level: Metadata
    resources:
      - group: ""
        resources: [secrets, configmaps, serviceaccounts/token]
      - group: authentication.k8s.io
        resources: [tokenreviews]
  # Noisy read-only system traffic.
  - level: None
    users: ["system:kube-proxy", "system:serviceaccount:kube-system:kube-proxy"]
    verbs: [watch]
    resources:
      - group: ""
        resources: [endpoints, services, services/status]
      - group: discovery.k8s.io
        resources: [endpointslices]
  - level: None
    userGroups: ["system:nodes"]
    verbs: [get, list, watch]
    resources:
      - group: ""
        resources: [nodes, nodes/status]
  - level: None
    nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version"]
  - level: None
    resources:
      - group: ""
        resources: [events]
      - group: events.k8s.io
        resources: [events]
  # Heartbeats: every node's lease and the controllers' leader election,
  # renewed every 10 s; they say nothing about who did what.
  - level: None
    userGroups: ["system:nodes"]
    verbs: [get, update]
    resources:
      - group: coordination.k8s.io
        resources: [leases]
  - level: None
    users: ["system:kube-controller-manager", "system:kube-scheduler"]
    verbs: [get, update]
    resources:
      - group: coordination.k8s.io
        resources: [leases]
  # Everything else: who, what, when, and the answer's status.
  - level: Metadata
`

// kubeletHardening is the kubelet's configuration beyond kubeadm's
// defaults (docs/security.md), in the KubeletConfiguration document.
const kubeletHardening = `# Hardened (docs/security.md); kubeadm's defaults already, said here: the
# read-only port off, anonymous requests refused, requests authenticated
# and authorized by the API server (which kubeadm lets reach the kubelet:
# kubeadm:apiserver-kubelet-client).
readOnlyPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
authorization:
  mode: Webhook
# Every container under the runtime's default seccomp profile unless its
# pod says otherwise (the static pods already ask for it).
seccompDefault: true
# The kernel's settings are the image's (its sysctl.d holds every value
# the kubelet checks): the kubelet refuses to start on other ones instead
# of changing them.
protectKernelDefaults: true
# A serving certificate of the cluster CA, asked for with a request that
# a control plane approves for the node's own names and addresses, and
# renewed the same way before it expires; the API server checks it
# (--kubelet-certificate-authority). Client certificates rotate too
# (kubeadm's default).
serverTLSBootstrap: true
rotateCertificates: true
# Deprecated and without effect in this kubelet; the CIS benchmark still
# reads it.
streamingConnectionIdleTimeout: 5m0s
tlsCipherSuites: [` + TLSCipherSuites + `]
tlsMinVersion: ` + TLSMinVersion + `
podPidsLimit: 4096
makeIPTablesUtilChains: true
eventRecordQPS: 5
`

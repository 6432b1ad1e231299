// Package kubeadmconfig renders the kubeadm configuration (v1beta4) a node
// hands to kubeadm's phases: InitConfiguration and ClusterConfiguration on
// the init node, JoinConfiguration on the others, plus the kubelet's and
// kube-proxy's component configuration. Everything is addressed by IP and
// through the node-local API balancer; the Kubernetes version is the one
// the slot's bundle carries, so kubeadm never looks anything up.
package kubeadmconfig

import (
	"bytes"
	"fmt"
	"text/template"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// Input is what a node's kubeadm configuration is made of.
type Input struct {
	Cluster *machineconfig.Cluster
	// NodeName is the node's name in the cluster (its hostname).
	NodeName string
	// KubernetesVersion is the version of the slot's bundle (v1.36.3).
	KubernetesVersion string
	// PodResolvConf is the resolv.conf kubelet hands pods whose DNS policy
	// is Default (CoreDNS among them); see the firstboot package.
	PodResolvConf string
	// Now is the render time: kubeadm takes the token's lifetime as a TTL
	// from when it creates it (the TTL line is the only one that changes
	// between renders; see TTLLine).
	Now time.Time
}

// TTLLine starts the one line of a rendered configuration that depends on
// the render time.
const TTLLine = "    ttl: "

// DNSDomain is the cluster's DNS domain.
const DNSDomain = "cluster.local"

// EncryptionAlgorithm is the key type of the certificates kubeadm makes
// (API server, etcd, front proxy, the components' kubeconfigs). kubeadm's
// default is RSA 2048; every TLS handshake with the API server or etcd
// then costs the server an RSA private-key operation, and on a slow node
// (a small NUC, emulation) right after a power cut the API server spends
// its time in handshakes from kubelets, controllers and health checks
// until they time out. An ECDSA P-256 handshake costs a fraction of that
// (BenchmarkMutualTLSHandshake), and the cluster's CAs are ECDSA P-256 already.
const EncryptionAlgorithm = "ECDSA-P256"

// CRISocket is containerd's CRI endpoint.
const CRISocket = "unix:///run/containerd/containerd.sock"

// Render returns the multi-document YAML for kubeadm's --config.
func Render(in Input) ([]byte, error) {
	c := in.Cluster
	if c == nil {
		return nil, fmt.Errorf("no cluster section")
	}
	if in.KubernetesVersion == "" || in.NodeName == "" {
		return nil, fmt.Errorf("kubeadm configuration needs the Kubernetes version and the node name")
	}
	// Joiners take the kubelet's and kube-proxy's configuration from the
	// cluster (kubeadm uploads the init node's), so only init carries it.
	tmpl := joinTemplate
	if c.Role == machineconfig.RoleInit {
		tmpl = initTemplate + components
	}
	t, err := template.New("kubeadm").Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return nil, err
	}
	// After the expiry the token has done its job (firstboot refuses a
	// config whose token expired before it was used), but an init node
	// still renders its configuration on every boot to verify it: a TTL of
	// a second, never zero, which kubeadm reads as "never expires".
	ttl := max(c.TokenExpires.Sub(in.Now).Truncate(time.Second), time.Second)
	encrypt := c.SecretsEncryptionKey != ""
	data := map[string]any{
		"C":                     c,
		"NodeName":              in.NodeName,
		"Version":               in.KubernetesVersion,
		"Endpoint":              c.APIEndpoint(),
		"Port":                  machineconfig.APIServerPort,
		"CRISocket":             CRISocket,
		"TokenTTL":              ttl.String(),
		"ControlPlane":          c.IsControlPlane(),
		"PodResolvConf":         in.PodResolvConf,
		"ControllerArgs":        argsYAML("    ", controllerArgs()),
		"ControllerManagerArgs": argsYAML("    ", controllerManagerArgs()),
		"APIServerArgs":         argsYAML("    ", apiServerArgs(encrypt)),
		"APIServerVolumes":      volumesYAML("    ", apiServerVolumes(encrypt)),
		"Encrypt":               encrypt,
		"KubeletHardening":      kubeletHardening,
		"Etcd":                  EtcdArgs,
		"PatchesDir":            PatchesDir,
		"DNSDomain":             DNSDomain,
		"EncryptionAlgorithm":   EncryptionAlgorithm,
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("render kubeadm configuration: %w", err)
	}
	return b.Bytes(), nil
}

const initTemplate = `# Written by Terrarium firstboot from the machine config; kubeadm reads it.
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
  - token: "{{.C.Token}}"
    ttl: "{{.TokenTTL}}"
    usages: [signing, authentication]
    groups: ["system:bootstrappers:kubeadm:default-node-token"]
    description: "Terrarium join token (imagebuild config cluster)"
localAPIEndpoint:
  advertiseAddress: "{{.C.NodeIP}}"
  bindPort: {{.Port}}
nodeRegistration:
  name: "{{.NodeName}}"
  criSocket: "{{.CRISocket}}"
  imagePullPolicy: IfNotPresent
  kubeletExtraArgs:
    - name: node-ip
      value: "{{.C.NodeIP}}"
# Patient probes for the control plane's static pods (see Patches).
patches:
  directory: "{{.PatchesDir}}"
# Generous: under emulation (QEMU without KVM) a control plane takes minutes.
timeouts:
  controlPlaneComponentHealthCheck: 20m0s
  kubeletHealthCheck: 10m0s
  kubernetesAPICall: 2m0s
  etcdAPICall: 2m0s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: "{{.C.Name}}"
kubernetesVersion: "{{.Version}}"
imageRepository: registry.k8s.io
certificatesDir: /etc/kubernetes/pki
# Leaf keys and certificates: ECDSA P-256 like the CAs, not kubeadm's
# RSA 2048 (see EncryptionAlgorithm).
encryptionAlgorithm: {{.EncryptionAlgorithm}}
# Every node reaches the API through its own balancer on loopback.
controlPlaneEndpoint: "{{.Endpoint}}"
networking:
  podSubnet: "{{.C.PodCIDR}}"
  serviceSubnet: "{{.C.ServiceCIDR}}"
  dnsDomain: {{.DNSDomain}}
apiServer:
  certSANs: ["127.0.0.1"{{range .C.ControlPlanes}}, "{{.}}"{{end}}]
  # Hardened beyond kubeadm's defaults (docs/security.md): Pod Security
  # admission at the cluster config's levels, an audit log on TERRA-STATE
  # rotated by size and age, no profiling, service-account tokens that
  # expire when they say, strong TLS only. Joining control planes get
  # this from the kubeadm-config ConfigMap and write the files it names
  # themselves.
{{- if .Encrypt}}
  # Secrets are encrypted in etcd (encryption-provider-config).
{{- else}}
  # Secrets are NOT encrypted in etcd: the cluster config holds no key.
{{- end}}
  extraArgs:
{{.APIServerArgs}}
  extraVolumes:
{{.APIServerVolumes}}
# etcd's heartbeats and elections timed for slow, loaded members (see
# EtcdArgs); joining control planes get this from the kubeadm-config
# ConfigMap.
etcd:
  local:
    dataDir: /var/lib/etcd
    extraArgs: {{.Etcd}}
# Leader election that rides out a slow API server: with the defaults
# (lease 15 s, renew 10 s, 5 s per request) a controller manager whose lease
# renewal waits on a busy etcd (a USB stick, a loaded host, emulation) exits
# and restarts, and its controllers (the CSR signer that joins nodes among
# them) never run long enough. The cost: a control-plane failover takes up
# to a minute instead of 15 s. Both without profiling, on loopback only;
# the controller manager keeps at most 1000 finished pods.
controllerManager:
  extraArgs:
{{.ControllerManagerArgs}}
scheduler:
  extraArgs:
{{.ControllerArgs}}
`

// LeaderElectionArgs are the controller manager's and the scheduler's
// leader-election flags (kubeadm extraArgs, YAML flow style): a lease that
// rides out a slow API server. See the ClusterConfiguration template.
const LeaderElectionArgs = `[{name: leader-elect-lease-duration, value: 60s}, {name: leader-elect-renew-deadline, value: 40s}, {name: leader-elect-retry-period, value: 10s}]`

// EtcdArgs are etcd's raft timings (kubeadm extraArgs, YAML flow style):
// a heartbeat every 500 ms and an election after 5 s without one, against
// etcd's 100 ms and 1 s. etcd's tuning guide sizes the heartbeat to the
// members' round trip and the election timeout to ten heartbeats; on a
// loaded member (a slow disk, a busy CPU, emulation) the round trip is the
// time until its process is scheduled, and a leader not scheduled for a
// second (common under emulation on a shared host) makes the followers
// call an election, a pause of every write and so of the API. The cost: a
// lost leader is replaced after 5 s instead of 1 s.
const EtcdArgs = `[{name: heartbeat-interval, value: "500"}, {name: election-timeout, value: "5000"}]`

const joinTemplate = `# Written by Terrarium firstboot from the machine config; kubeadm reads it.
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "{{.Endpoint}}"
    token: "{{.C.Token}}"
    caCertHashes: ["{{.C.CACertHash}}"]
nodeRegistration:
  name: "{{.NodeName}}"
  criSocket: "{{.CRISocket}}"
  imagePullPolicy: IfNotPresent
  kubeletExtraArgs:
    - name: node-ip
      value: "{{.C.NodeIP}}"
{{- if .ControlPlane}}
controlPlane:
  localAPIEndpoint:
    advertiseAddress: "{{.C.NodeIP}}"
    bindPort: {{.Port}}
# Patient probes for the control plane's static pods (see Patches).
patches:
  directory: "{{.PatchesDir}}"
{{- end}}
# etcdAPICall bounds kubeadm's wait for a joining etcd member to start and
# catch up before its promotion from learner: minutes under emulation.
timeouts:
  discovery: 15m0s
  tlsBootstrap: 15m0s
  controlPlaneComponentHealthCheck: 20m0s
  kubeletHealthCheck: 10m0s
  kubernetesAPICall: 2m0s
  etcdAPICall: 10m0s
`

const components = `---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
containerRuntimeEndpoint: "{{.CRISocket}}"
resolvConf: "{{.PodResolvConf}}"
serializeImagePulls: false
{{.KubeletHardening -}}
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
`

// PatchesDir is where a control-plane node keeps the files of Patches; its
// rendered configuration points kubeadm's phases at it.
const PatchesDir = "/etc/terrarium/kubeadm-patches"

// EtcdUser is the account etcd runs as on a control plane: the image's
// etcd user (os/overlay/usr/lib/sysusers.d), with the IDs the node's own
// /etc/passwd gives it. The zero value is root: etcd as kubeadm runs it
// (a plain kubeadm node's, to compare with).
type EtcdUser struct{ UID, GID int }

// Patches returns kubeadm's patches for the control plane's static pods,
// by file name (kubeadm's "target+patchtype.extension"), with etcd run as
// etcd.
//
// Patient probes. kubeadm gives kube-apiserver and etcd 4 minutes to pass
// their startup probes (24 × 10 s) and kills them after 80 s of failed
// liveness probes (8 × 10 s). On a slow machine (a USB stick, a small NUC,
// emulation) right after a power cut, kube-apiserver's post-start hooks can
// take longer than that while etcd replays its log: the kubelet kills it,
// it starts over under the same load, and the node loops for many minutes
// (make e2e showed eight restarts in a row). These patches give both 15
// minutes to start and 3 minutes of failed liveness probes before a
// restart; readiness, which only steers traffic, keeps kubeadm's values.
//
// etcd first for the CPU. kubeadm requests 100m for etcd and 250m for
// kube-apiserver, and a pod's CPU request is its weight when the node's CPU
// is contended: on a busy one-core control plane kube-apiserver got 2.5
// times etcd's share, and every write of the cluster, which waits for a
// quorum of etcd members, waited for the slowest member's etcd to be
// scheduled. Here etcd requests the most (300m); kube-apiserver keeps its
// 250m (a starved kube-apiserver fails its own post-start hooks), and the
// controller manager and the scheduler, which mostly wait on the API, give
// up what etcd gains: the four request kubeadm's 650m in all, so a node
// that admitted kubeadm's pods admits these.
//
// etcd as etcd (the CIS benchmark's 1.1.12). kubeadm runs etcd as root;
// here it runs as the etcd user, without privileges or capabilities (its
// ports are unprivileged), owning its data directory and copies of its
// own certificates and keys (layout.EtcdOwnPKIDir, mounted where kubeadm
// mounts its PKI's etcd directory, which stays root's), both made by
// firstboot before kubeadm writes etcd's static pod (docs/security.md).
func Patches(etcd EtcdUser) map[string][]byte {
	return map[string][]byte{
		"etcd+strategic.yaml":                    staticPodPatch("etcd", "300m", true, runAs(etcd)+etcdOwnPKI(etcd)),
		"kube-apiserver+strategic.yaml":          staticPodPatch("kube-apiserver", "250m", true, ""),
		"kube-controller-manager+strategic.yaml": staticPodPatch("kube-controller-manager", "50m", false, ""),
		"kube-scheduler+strategic.yaml":          staticPodPatch("kube-scheduler", "50m", false, ""),
	}
}

// runAs is a container's securityContext that runs it as u,
// unprivileged; none for root.
func runAs(u EtcdUser) string {
	if u == (EtcdUser{}) {
		return ""
	}
	return fmt.Sprintf(`      securityContext:
        runAsUser: %d
        runAsGroup: %d
        runAsNonRoot: true
        allowPrivilegeEscalation: false
        capabilities:
          drop: [ALL]
`, u.UID, u.GID)
}

// etcdOwnPKI mounts etcd's own copies of its certificates and keys
// (layout.EtcdOwnPKIDir) as kubeadm's volume etcd-certs, in place of
// kubeadm's PKI directory (a strategic merge: volumes by name); none for
// root, which reads kubeadm's.
func etcdOwnPKI(u EtcdUser) string {
	if u == (EtcdUser{}) {
		return ""
	}
	return `  volumes:
    - name: etcd-certs
      hostPath:
        path: ` + layout.EtcdOwnPKIDir + `
        type: Directory
`
}

// staticPodPatch is the patch of a static pod's one container: its CPU
// request, patient probes, and securityContext (YAML at the container's
// indentation, or ""), then what follows at the pod spec's (volumes).
func staticPodPatch(container, cpu string, patientProbes bool, securityContext string) []byte {
	p := `# Written by Terrarium firstboot; kubeadm applies it to the static pod.
spec:
  containers:
    - name: ` + container + `
      resources:
        requests:
          cpu: ` + cpu + "\n"
	if patientProbes {
		p += `      startupProbe:
        failureThreshold: 90
      livenessProbe:
        failureThreshold: 18
`
	}
	return []byte(p + securityContext)
}

// Package layout is Terrarium's on-disk contract: partition labels and types,
// sizes and alignment, ESP paths, boot entry names and the layout of
// TERRA-STATE. Both imagebuild (which writes disks) and firstboot and the
// initramfs (which read them) import it, so the two sides cannot drift.
//
// Partitions are always found by GPT partition label, never by number.
package layout

import (
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/google/uuid"
)

// Partition labels (GPT partition names). TERRA-STATE is created on first
// boot, never by the image builder.
const (
	LabelESP   = "EFI"
	LabelSlotA = "TERRA-A"
	LabelSlotB = "TERRA-B"
	LabelState = "TERRA-STATE"
	// LabelBIOSBoot holds GRUB's core image on an image that also boots
	// under BIOS (docs/on-disk-contract.md#bios-boot): the MBR's boot
	// code loads it by its sectors, so nothing reads it by name but the
	// checks.
	LabelBIOSBoot = "BIOS-BOOT"

	// LabelConfig is the filesystem label of a config disk.
	LabelConfig = "TERRA-CONFIG"
	// LabelConfigFAT is LabelConfig as FAT stores it: FAT labels hold 11
	// characters, and every FAT formatter (mkfs.fat -n, Windows) truncates
	// TERRA-CONFIG to this.
	LabelConfigFAT = "TERRA-CONFI"
	// ConfigFile is the machine config's name on a config volume, and
	// ConfigSignatureFile its detached signature's.
	ConfigFile          = "machine.yaml"
	ConfigSignatureFile = "machine.yaml.sig"
	// LabelBundle is the filesystem label of a side-load bundle disk, and
	// LabelBundleFAT the same as FAT stores it (11 characters).
	LabelBundle    = "TERRA-BUNDLE"
	LabelBundleFAT = "TERRA-BUNDL"
	// BundleIndexSignature is the signature of a side-load bundle's
	// index.json, beside it (imagebuild bundle disk --sign): what a node
	// whose policy takes only signed bundles checks.
	BundleIndexSignature = "index.json.sig"
	// BundleReplacesAnnotation, "true" on an entry of a side-load
	// bundle's index.json (imagebuild bundle disk --replace-tags), says
	// the entry replaces the image a node holds under the entry's
	// name:tag. A node honours it only in a bundle signed for bundles by
	// a key it trusts for bundles (the signature covers index.json, so
	// the annotation too); otherwise a side-load never moves a tag.
	BundleReplacesAnnotation = "dev.terrarium.replaces"
	// BundleGenerationAnnotation, a whole number above 0 beside
	// BundleReplacesAnnotation (imagebuild bundle disk --generation), is
	// the bundle's generation: a node records for each tag the highest
	// generation that set it and refuses a replacing bundle at or below
	// it, so an older signed bundle cannot be played again to move a tag
	// back. Signed with index.json, like the annotation it goes with.
	BundleGenerationAnnotation = "dev.terrarium.generation"
	// BundleRepositoryAnnotation on an index.json entry of a bundle's OCI
	// layout (the slot's, a side-load disk's) records the manifest under
	// a repository by digest alone, without a tag: how imagebuild carries
	// the artifacts whose subject is a bundled image (signatures, SBOMs,
	// attestations), which the registry lists through the referrers API.
	// The registry's cache marks its untagged manifests the same way.
	BundleRepositoryAnnotation = "io.terrarium.registry.repository"
	// LabelSupport is the label of a stick a running node writes a
	// support bundle to, and LabelSupportFAT the same as FAT stores it.
	LabelSupport    = "TERRA-SUPPORT"
	LabelSupportFAT = "TERRA-SUPPO"
	// LabelUpgrade is the label of a stick holding an upgrade file for a
	// running node, and LabelUpgradeFAT the same as FAT stores it.
	LabelUpgrade    = "TERRA-UPGRADE"
	LabelUpgradeFAT = "TERRA-UPGRA"
	// LabelBackup is the label of a stick a running control plane writes
	// its newest etcd backup to, and from which a new init node restores
	// the cluster; LabelBackupFAT the same as FAT stores it.
	LabelBackup    = "TERRA-BACKUP"
	LabelBackupFAT = "TERRA-BACKU"
	// LabelESPFS is the FAT volume label of the ESP.
	LabelESPFS = "TERRA-EFI"
	// LabelStateFS is the ext4 volume label of TERRA-STATE.
	LabelStateFS = "TERRA-STATE"
	// LabelVolumesLUKS is the LUKS2 label of an encrypted disk volume
	// area, which holds LabelVolumesFS.
	LabelVolumesLUKS = "TERRA-VOLUMES-LUKS"
	// LabelStateLUKS is the LUKS2 label of an encrypted TERRA-STATE
	// (docs/state-encryption.md), whose ext4 inside is LabelStateFS.
	LabelStateLUKS = "TERRA-STATE-LUKS"
	// StateMapperName is the device-mapper name an encrypted TERRA-STATE
	// is opened as: StateMapperDev.
	StateMapperName = "terrarium-state"
	StateMapperDev  = "/dev/mapper/" + StateMapperName
	// The encryptions TERRA-STATE can have (RunStateEncryption, the
	// machine config's stateEncryption): LUKS2 with its key sealed by
	// the TPM, or none.
	StateEncryptionTPM  = "tpm"
	StateEncryptionNone = "none"
	// LabelVolumesFS is the ext4 volume label of a node's volume area
	// (LocalVolumesImage).
	LabelVolumesFS = "TERRA-VOLUMES"
)

// GPT partition type GUIDs, from the Discoverable Partitions Specification.
const (
	TypeESP        = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
	TypeRootX86_64 = "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"
	TypeVar        = "4D21B016-B534-45C2-A9FB-5C16E091FD2D"
	// TypeBIOSBoot is GRUB's BIOS boot partition ("Hah!IdontNeedEFI").
	TypeBIOSBoot = "21686148-6449-6E6F-744E-656564454649"
)

// MaxBootTries is the largest boot counter an entry carries: a build
// spec's boot.tries is 1 to it, and an upgrade's entry takes the running
// build's. GRUB's configuration counts up to it.
const MaxBootTries = 9

// BIOSBootSize is the BIOS boot partition's size: room for GRUB's core
// image, which its boot code reads with 16-bit sector counts.
const BIOSBootSize = MiB

// Sizes and alignment.
const (
	MiB = int64(1) << 20
	// Alignment of every partition start and size.
	Alignment = MiB
	// SectorSize is the logical sector size Terrarium writes.
	SectorSize = 512
	// FirstPartitionOffset is where the first partition starts (1 MiB).
	FirstPartitionOffset = MiB
	// GPTReserve is what the backup GPT needs at the end of the disk,
	// rounded up to the alignment.
	GPTReserve = MiB
	// MinStateSize is the smallest TERRA-STATE the initramfs will create.
	MinStateSize = 512 * MiB
)

// Slot is an A/B system slot.
type Slot string

// The two slots.
const (
	SlotA Slot = "a"
	SlotB Slot = "b"
)

// Slots lists both slots in order.
func Slots() []Slot { return []Slot{SlotA, SlotB} }

// Label is the GPT partition label of the slot.
func (s Slot) Label() string {
	if s == SlotB {
		return LabelSlotB
	}
	return LabelSlotA
}

// Valid reports whether s names a slot.
func (s Slot) Valid() bool { return s == SlotA || s == SlotB }

// Other returns the other slot.
func (s Slot) Other() Slot {
	if s == SlotA {
		return SlotB
	}
	return SlotA
}

// ESP paths (FAT, forward slashes, relative to the ESP root).
const (
	ESPBootloader       = "EFI/BOOT/BOOTX64.EFI"
	ESPSystemdBoot      = "EFI/systemd/systemd-bootx64.efi"
	ESPLoaderConf       = "loader/loader.conf"
	ESPEntriesDir       = "loader/entries"
	ESPEntryTokenPrefix = "terrarium-"
	// ESPEnrollKeysDir holds a Secure Boot image's enrollment files
	// (PK.auth, KEK.auth, db.auth): systemd-boot enrolls them by itself,
	// with loader.conf's secure-boot-enroll, from loader/keys/auto only.
	ESPEnrollKeysDir = "loader/keys/auto"
	// ESPGrubConfig is the configuration of GRUB on an image that also
	// boots under BIOS: it boots a slot from the same entries in
	// ESPEntriesDir as systemd-boot does. ESPGrubEnv is its environment
	// block (package grubenv): the slot last installed (GrubPrefer) and
	// the tries GRUB made that the node has yet to count in an entry's
	// name (Slot.GrubTried, Slot.GrubTriedOf).
	ESPGrubConfig = "grub/grub.cfg"
	ESPGrubEnv    = "grub/grubenv"
	GrubPrefer    = "terrarium_prefer"
)

// GrubTried is the GRUB environment variable holding an x for each try
// GRUB made of the slot's counted entry that the node has not counted
// yet, and GrubTriedOf the entry file those tries were of.
func (s Slot) GrubTried() string { return "terrarium_tried_" + string(s) }

// GrubTriedOf is the GRUB environment variable naming the entry file the
// tries in GrubTried were of.
func (s Slot) GrubTriedOf() string { return s.GrubTried() + "_of" }

// KernelPath is the ESP path of the slot's kernel.
func (s Slot) KernelPath() string { return fmt.Sprintf("terrarium/%s/vmlinuz", s) }

// InitrdPath is the ESP path of the slot's initramfs.
func (s Slot) InitrdPath() string { return fmt.Sprintf("terrarium/%s/initrd.img", s) }

// Cmdline is the slot's kernel command line: args, then its own
// terrarium.slot (args is not changed).
func (s Slot) Cmdline(args []string) []string {
	return append(append([]string(nil), args...), CmdlineSlot+"="+string(s))
}

// UKIPath is the ESP path of the slot's signed unified kernel image
// (kernel, initramfs and command line in one PE) on a Secure Boot image,
// which has it in place of the kernel and the initramfs.
func (s Slot) UKIPath() string { return fmt.Sprintf("terrarium/%s/terrarium.efi", s) }

// EntryID is the Boot Loader Spec entry id of the slot (the file name
// without boot counter and without ".conf").
func (s Slot) EntryID() string { return ESPEntryTokenPrefix + string(s) }

// EntryFile is the entry file name with an initial boot counter of tries
// (tries <= 0 means no counting: the entry is already blessed).
func (s Slot) EntryFile(tries int) string {
	if tries <= 0 {
		return s.EntryID() + ".conf"
	}
	return fmt.Sprintf("%s+%d.conf", s.EntryID(), tries)
}

// Kernel command line keys that the initramfs and firstboot read.
const (
	CmdlineSlot = "terrarium.slot"
	// CmdlineResetState asks the initramfs to recreate TERRA-STATE (factory reset).
	CmdlineResetState = "terrarium.reset-state"
	// CmdlineRescue drops into the rescue shell before switch_root.
	CmdlineRescue = "terrarium.rescue"
	// CmdlineLive boots from the ISO (the live entry of its ESP): the
	// initramfs finds the medium by its volume ID (ISOVolumeID) and mounts
	// the slot from ISOSlotFile on it.
	CmdlineLive = "terrarium.live"
	// CmdlineInstall=auto makes a live boot install to the first empty
	// disk (the machine config's install section chooses otherwise).
	CmdlineInstall = "terrarium.install"
	// CmdlineState says where a live boot keeps TERRA-STATE: "disk" (the
	// TERRA-STATE of an earlier live boot, else a new one on the first
	// empty disk, else fail), "ram" (a tmpfs: nothing survives a reboot).
	// Without it: an earlier live boot's TERRA-STATE, else RAM.
	CmdlineState = "terrarium.state"
)

// Values of CmdlineState.
const (
	StateOnDisk = "disk"
	StateInRAM  = "ram"
)

// The hybrid ISO (the `iso` output): an ISO 9660 filesystem holding the
// slot, booted under UEFI through an El Torito EFI image that is also its
// appended EFI partition (a USB stick written with dd boots the same way),
// and under BIOS through GRUB's El Torito image, which the MBR's boot code
// also loads from a stick.
const (
	// ISOVolumeID is the ISO's volume ID; the initramfs of a live boot
	// finds the medium by it.
	ISOVolumeID = "TERRARIUM"
	// ISOSlotFile is the slot's squashfs on the ISO.
	ISOSlotFile = "terrarium/slot.squashfs"
	// ISOReleaseFile is the build's release.json on the ISO (the one in
	// the slot, readable without mounting it).
	ISOReleaseFile = "terrarium/release.json"
	// ISOHeadFile is the start of the disk image, up to the first slot:
	// protective MBR, GPT and the EFI partition (its trailing zeros left
	// out). The installer writes it, then the slot at TERRA-A's offset.
	ISOHeadFile = "terrarium/disk-head.img"
	// ISOSumsFile lists the sha256 of ISOSlotFile and ISOHeadFile, in
	// sha256sum's format ("<hex>  slot.squashfs").
	ISOSumsFile = "terrarium/SHA256SUMS"
	// ISOGrubDir holds BIOS boot's GRUB files on the ISO: its El Torito
	// core image (ISOGrubCore), its menu (grub.cfg) and the live entries'
	// kernel and initramfs (the UEFI entries' are on the EFI image, which
	// GRUB cannot reach from a CD).
	ISOGrubDir    = "boot/grub"
	ISOGrubCore   = ISOGrubDir + "/eltorito.img"
	ISOGrubConfig = ISOGrubDir + "/grub.cfg"
	ISOGrubKernel = ISOGrubDir + "/vmlinuz"
	ISOGrubInitrd = ISOGrubDir + "/initrd.img"
	// LiveMediumMount is where the initramfs mounts the ISO on a live
	// boot; it stays mounted (under /run) after switch_root.
	LiveMediumMount = "/run/terrarium/medium"
)

// Paths inside the initramfs that the build writes and its /init reads.
const (
	InitramfsModulesDir   = "/lib/modules"
	InitramfsModulesOrder = "/lib/modules/load.order"
	InitramfsBusybox      = "/bin/busybox"
)

// Paths inside a slot's root filesystem.
const (
	// ReleaseFile describes the slot's build: version, bundle, inputs.
	ReleaseFile = "/usr/lib/terrarium/release.json"
	// UpgradeKeysFile lists the public keys (ed25519:..., one a line)
	// the slot trusts for upgrade files, from its build spec.
	UpgradeKeysFile = "/usr/lib/terrarium/upgrade-keys"
	// SlotIndexFile lists every path of the slot with its content's hash
	// (package slotindex), itself left out: what a node compares with an
	// upgrade's to see what the upgrade changes.
	SlotIndexFile = "/usr/lib/terrarium/slot-index"
	// StatusFile is where firstboot publishes the node's status (in
	// /run, not on a disk): what the banner and `firstboot status` show.
	StatusFile = "/run/terrarium/status.json"
	// StateMount is where the initramfs mounts TERRA-STATE in the real root.
	StateMount = "/state"
	// BundleDir is where the slot carries its bundle, one OCI layout.
	BundleDir = "/usr/lib/terrarium/bundle"
	// SlotLayersDir is where the slot carries its bundle's layers
	// unpacked, one directory per diffID (<dir>/sha256/<hex>), for the
	// node's snapshotter (pkg/image/layers, pkg/node/images/snapshotter).
	SlotLayersDir = "/usr/lib/terrarium/layers"
	// SnapshotterRoot is the node's snapshotter's overlayfs snapshots on
	// STATE, and SnapshotterSocket where containerd reaches it (a proxy
	// snapshotter named SnapshotterName).
	SnapshotterRoot   = "/var/lib/terrarium/snapshotter"
	SnapshotterSocket = "/run/terrarium/snapshotter.sock"
	SnapshotterName   = "terrarium"
	// StickSocket is where the stick service listens
	// (terrarium-stick.socket): a node's job that writes to a stick (a
	// support bundle, a backup) asks it to mount the stick in a sandbox
	// of its own and gets the mount's root directory back as an open file
	// (pkg/node/config/media). StickMountDir is where each of the
	// service's instances mounts its stick, in its own mount namespace.
	StickSocket   = "/run/terrarium/stick.sock"
	StickMountDir = "/mnt"
	// RegistryConfigFile is the registry service's configuration, which
	// firstboot writes from the machine config.
	RegistryConfigFile = "/etc/terrarium/registry.json"
	// RegistryCacheDir is the registry's writable cache (on STATE through
	// /var), and RegistryMountDir where it mounts side-load disks. The
	// registry's unit names both (StateDirectory=, RuntimeDirectory=): its
	// sandbox leaves only them writable.
	RegistryCacheDir = "/var/lib/terrarium/registry"
	RegistryMountDir = "/run/terrarium/bundle-disk"
	// RegistrySideloadLog is the registry's record of the side-load disks
	// it met, one JSON object a line (registryd.SideloadRecord): what
	// each added, the tags it replaced with their old digests, or why it
	// was refused. Beside the cache, in the unit's StateDirectory=.
	RegistrySideloadLog = RegistryCacheDir + "/sideloads.jsonl"
	// RegistryPreviousSlotDir is where the registry mounts the slot the
	// node did not boot, read-only, to serve that slot's bundle too: the
	// slot an upgrade's trial boot falls back to until the boot is
	// blessed, or the slot whose Kubernetes the node runs in place
	// (RunInPlaceSlot). Its unit's other RuntimeDirectory=.
	RegistryPreviousSlotDir = "/run/terrarium/previous-slot"
	// RunTrialBoot is present while this boot is an upgrade's trial (its
	// slot on trial, the other slot blessed) and holds the other slot's
	// name. The initramfs writes it; firstboot removes it once it blesses
	// the boot.
	RunTrialBoot = "/run/terrarium/trial-boot"
	// RunInPlaceSlot is present while this boot runs the Kubernetes of an
	// upgrade staged in the other slot, in place (package inplace), and
	// holds that slot's name; InPlaceSlotDir is where firstboot mounts
	// that slot, read-only, to bind its Kubernetes programs over the
	// running slot's. Both last until the next boot, which boots the
	// slot.
	RunInPlaceSlot = "/run/terrarium/in-place-slot"
	InPlaceSlotDir = "/run/terrarium/in-place"
	// RunStateEncryption says which encryption TERRA-STATE has on this
	// boot: StateEncryptionTPM, or StateEncryptionNone followed by why
	// ("none this machine has no TPM 2.0"). The initramfs writes it.
	RunStateEncryption = "/run/terrarium/state-encryption"
	// KubeletClientCert is the kubelet's client certificate and key (one
	// PEM file, kept current by the kubelet): a cluster node's identity,
	// which its registry also shows its peers.
	KubeletClientCert = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	// KubeletPKIDir holds the kubelet's own certificates: the client one
	// (kubelet-client-<time>.pem, KubeletClientCert links the current)
	// and its self-signed serving pair, kubelet.crt and kubelet.key.
	KubeletPKIDir = "/var/lib/kubelet/pki"
	// The node's agent and the programs containerd starts for each pod
	// (os/terrarium.yaml's components): read ahead while a worker waits
	// for the API, so that they start from the page cache.
	KubeletProgram = "/usr/bin/kubelet"
	KubeadmProgram = "/usr/bin/kubeadm"
	KubectlProgram = "/usr/bin/kubectl"
	ShimProgram    = "/usr/bin/containerd-shim-runc-v2"
	RuncProgram    = "/usr/sbin/runc"
	CNIPluginDir   = "/usr/lib/cni"
	// EmbeddedConfig is a machine config the build spec bakes into the
	// slot (optional), with its signature at EmbeddedConfig+".sig".
	EmbeddedConfig = "/usr/lib/terrarium/machine.yaml"
	// ContainerdRoot is containerd's store (content, snapshots, metadata),
	// on STATE through /var.
	ContainerdRoot = "/var/lib/containerd"
	// ContainerdMetaDB and ContainerdContentDir are containerd's metadata
	// (its bolt plugin's) and content store under ContainerdRoot, where
	// the node's snapshotter registers the slot's bundled images before
	// containerd starts (pkg/node/images/imageseed); ContainerdCRINamespace is
	// the namespace of the images and containers of Kubernetes.
	ContainerdMetaDB       = ContainerdRoot + "/io.containerd.metadata.v1.bolt/meta.db"
	ContainerdContentDir   = ContainerdRoot + "/io.containerd.content.v1.content"
	ContainerdCRINamespace = "k8s.io"
	// EtcdDataDir is the local etcd member's data (kubeadm's), on STATE
	// through /var, the etcd user's alone (0700).
	EtcdDataDir = "/var/lib/etcd"
	// EtcdUser is the account etcd runs as on control planes, which owns
	// its data directory and its own certificates. The image declares it
	// in SysusersFile, its system users (sysusers.d(5)), with a fixed ID.
	EtcdUser     = "etcd"
	SysusersFile = "/usr/lib/sysusers.d/terrarium.conf"
	// KubernetesPKIDir is kubeadm's PKI directory, and EtcdManifest the
	// static pod its etcd phase writes (a control plane runs etcd once it
	// exists).
	KubernetesPKIDir = "/etc/kubernetes/pki"
	EtcdManifest     = "/etc/kubernetes/manifests/etcd.yaml"
	// EtcdOwnPKIDir holds etcd's copies of its CA's certificate and of
	// its serving and peer pairs, etcd's alone (0700, files 0600): etcd's
	// static pod mounts it where kubeadm would mount KubernetesPKIDir's
	// etcd directory, so that etcd runs as EtcdUser while everything
	// under KubernetesPKIDir stays root's (the CIS benchmark's 1.1.19).
	// Firstboot copies the files after every kubeadm step.
	EtcdOwnPKIDir = "/etc/terrarium/etcd-pki"
	// The control plane's hardening files (docs/security.md), written by
	// firstboot before kubeadm runs, root's alone (0600), and mounted
	// read-only into kube-apiserver: the EncryptionConfiguration of
	// Secrets in etcd (only when the cluster config holds a key), the
	// audit Policy, and the AdmissionConfiguration of Pod Security.
	EncryptionConfigFile = "/etc/kubernetes/encryption-config.yaml"
	AuditPolicyFile      = "/etc/kubernetes/audit-policy.yaml"
	AdmissionConfigFile  = "/etc/kubernetes/admission-config.yaml"
	// AuditLogDir holds kube-apiserver's audit log, AuditLogFile, on STATE
	// through /var (0700; the API server rotates and compresses it into
	// audit-<time>.log.gz beside it).
	AuditLogDir  = "/var/log/kubernetes/audit"
	AuditLogFile = AuditLogDir + "/audit.log"
	// EtcdSnapshotDir holds a control plane's scheduled etcd snapshots
	// (etcd-<time>.db, plain: they stay on the node like etcd's data),
	// and BackupDir the encrypted backups `firstboot backup` writes.
	EtcdSnapshotDir = "/var/lib/terrarium/etcd-snapshots"
	BackupDir       = "/var/lib/terrarium/backups"
	// KubernetesBeforeUpgradeDir keeps, per Kubernetes version
	// (<dir>/v1.36.3/...), the static pod manifests and kubelet
	// configuration a node had before a Kubernetes upgrade changed them,
	// for a rollback to the old slot.
	KubernetesBeforeUpgradeDir = "/var/lib/terrarium/kubernetes-before-upgrade"
	// KubernetesClusterRestoreFile names the Kubernetes version whose
	// cluster-wide kubeadm objects (the ClusterConfiguration, the
	// kubelet's configuration, CoreDNS, kube-proxy) a control plane is to
	// put back: it ran `kubeadm upgrade apply` on a slot that rolled back.
	KubernetesClusterRestoreFile = "/var/lib/terrarium/kubernetes-cluster-restore"
	// EtcdRestoreDir holds, after a rollback on a control plane whose
	// upgrade moved etcd's data to a newer minor version, the etcd
	// manifest from before the upgrade and the path of its pre-upgrade
	// snapshot, until the kubernetes-upgrade phase restores etcd from it.
	EtcdRestoreDir = "/var/lib/terrarium/etcd-restore"
	// UpgradesDir is an OCI image layout holding the upgrade files the
	// node accepted or fetched, as OCI artifacts, which its registry
	// serves to its peers for a cluster-wide rollout; firstboot writes it.
	UpgradesDir = "/var/lib/terrarium/upgrades"
	// UpgradeRepository is the repository they are served under.
	UpgradeRepository = "terrarium.internal/upgrade"
	// LocalVolumesDir is a cluster node's volume area, where the
	// local-path StorageClass keeps the volumes of the pods the node runs
	// (pvc-<uid>_<namespace>_<claim>/): the ext4 filesystem in
	// LocalVolumesImage, a file on TERRA-STATE allocated whole when first
	// made, mounted here (loop, nodev, nosuid). LocalVolumesMarker, at its
	// root, says the area is mounted: the volume helper makes no volume
	// in a directory without it.
	LocalVolumesDir    = "/var/lib/terrarium/volumes"
	LocalVolumesImage  = "/var/lib/terrarium/volumes.ext4"
	LocalVolumesMarker = ".terrarium-volume-area"
	// LocalVolumesUnit mounts the area, in the host's mount namespace
	// (the image's unit; firstboot's own mounts are private).
	LocalVolumesUnit = "var-lib-terrarium-volumes.mount"
	// LocalVolumesDiskDropIn turns LocalVolumesUnit to a whole disk's
	// filesystem (cluster.localStorage.disk), by its UUID: firstboot
	// writes it once it formatted or found the disk; the /etc overlay on
	// TERRA-STATE keeps it for every later boot.
	LocalVolumesDiskDropIn = "/etc/systemd/system/" + LocalVolumesUnit + ".d/disk.conf"
	// LocalVolumesKey is the key of an encrypted disk area (a node whose
	// TERRA-STATE is encrypted encrypts its disk area too): 32 random
	// bytes, on TERRA-STATE, which guards it.
	LocalVolumesKey = "/var/lib/terrarium/volumes.key"
	// LocalVolumesOpenUnit opens an encrypted disk area as
	// LocalVolumesMapperDev before LocalVolumesUnit mounts it; firstboot
	// writes it with the drop-in.
	LocalVolumesOpenUnit   = "terrarium-volumes-open.service"
	LocalVolumesMapperName = "terrarium-volumes"
	LocalVolumesMapperDev  = "/dev/mapper/" + LocalVolumesMapperName
)

// TERRA-STATE layout, relative to its root.
const (
	StateVarDir   = "var"       // bind-mounted on /var
	StateEtcUpper = "etc/upper" // /etc overlay upper dir
	StateEtcWork  = "etc/work"  // /etc overlay work dir
	// StateTerrarium is firstboot's own state. Its files have one owner,
	// pkg/node/config/nodestate, which alone builds their paths from the
	// constants below (pkg/repo's test keeps it so); StateUnpackWindow is
	// pkg/node/images/unpackwindow's.
	StateTerrarium = "terrarium"
	StateJournal   = "terrarium/journal.json"
	// StateNodeConfig is the config the node enrolled with (or the last
	// signed change it applied): its desired state, 0600 (it may carry
	// the cluster's keys). Its digest and source are in the journal.
	StateNodeConfig = "terrarium/machine.yaml"
	StateMarkerFile = "terrarium/created" // written once, when STATE is created
	// StateResetRequest asks the initramfs to erase TERRA-STATE on the next
	// boot (`firstboot reset`), as CmdlineResetState does.
	StateResetRequest = "terrarium/reset-requested"
	// StateUpgradeRequest asks the running node to install an upgrade file
	// (`firstboot upgrade`); the runner, the node state's one writer,
	// takes it and answers in StateUpgradeResult.
	StateUpgradeRequest = "terrarium/upgrade-request.json"
	StateUpgradeResult  = "terrarium/upgrade-result.json"
	// StateUnpackWindow exists while containerd may be unpacking images
	// onto STATE during formation: a boot that finds it knows a power cut
	// may have torn what containerd unpacked, and starts containerd from
	// an empty store (the images come again from the slot's bundle).
	StateUnpackWindow = "terrarium/images-unpacking"
	// StateUnformattedMagic is written at offset 0 of a freshly created
	// TERRA-STATE partition; only a partition carrying it (and no ext4) is
	// ever formatted implicitly.
	StateUnformattedMagic = "TERRARIUM-STATE-UNFORMATTED\x00"
)

// StateMarkBlock is the 4 KiB block written at the start of a TERRA-STATE
// partition Terrarium has just created (StateUnformattedMagic, then
// zeros): only a partition carrying it, and no filesystem, is ever
// formatted implicitly. Each call returns a new buffer.
func StateMarkBlock() []byte {
	b := make([]byte, 4096)
	copy(b, StateUnformattedMagic)
	return b
}

// StableGUID derives a deterministic RFC 4122 (version 5 style) GUID from
// an image id and a name, so the same build inputs give the same GPT.
func StableGUID(imageID, name string) string {
	sum := sha256.Sum256([]byte("terrarium\x00" + imageID + "\x00" + name))
	var u uuid.UUID
	copy(u[:], sum[:16])
	u[6] = (u[6] & 0x0f) | 0x50
	u[8] = (u[8] & 0x3f) | 0x80
	return u.String()
}

// AlignUp rounds n up to a multiple of Alignment.
func AlignUp(n int64) int64 { return (n + Alignment - 1) / Alignment * Alignment }

// SlotLayer is where a layer with diffID (sha256:<hex>) is unpacked under
// root (SlotLayersDir, or the snapshotter's copies): root/sha256/<hex>.
// ok is false for a diffID of another form, which names no directory.
func SlotLayer(root, diffID string) (dir string, ok bool) {
	alg, hex, found := strings.Cut(diffID, ":")
	if !found || alg != "sha256" || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", false
	}
	return filepath.Join(root, alg, hex), true
}

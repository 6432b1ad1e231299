package layout

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEntryFile(t *testing.T) {
	tests := []struct {
		slot  Slot
		tries int
		want  string
	}{
		{SlotA, 3, "terrarium-a+3.conf"},
		{SlotB, 3, "terrarium-b+3.conf"},
		{SlotA, 1, "terrarium-a+1.conf"},
		{SlotB, 9, "terrarium-b+9.conf"},
		{SlotA, 0, "terrarium-a.conf"},
		{SlotB, 0, "terrarium-b.conf"},
		{SlotA, -1, "terrarium-a.conf"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.slot.EntryFile(tt.tries), "Slot(%q).EntryFile(%d)", tt.slot, tt.tries)
		})
	}
}

func TestSlot(t *testing.T) {
	tests := []struct {
		slot                  Slot
		valid                 bool
		other                 Slot
		label                 string
		entryID, kernel, init string
		uki                   string
	}{
		{SlotA, true, SlotB, LabelSlotA, "terrarium-a", "terrarium/a/vmlinuz", "terrarium/a/initrd.img", "terrarium/a/terrarium.efi"},
		{SlotB, true, SlotA, LabelSlotB, "terrarium-b", "terrarium/b/vmlinuz", "terrarium/b/initrd.img", "terrarium/b/terrarium.efi"},
		// Invalid slots are not slots, but Other and Label still give
		// answers that never name a third partition.
		{Slot(""), false, SlotA, LabelSlotA, "terrarium-", "terrarium//vmlinuz", "terrarium//initrd.img", "terrarium//terrarium.efi"},
		{Slot("A"), false, SlotA, LabelSlotA, "terrarium-A", "terrarium/A/vmlinuz", "terrarium/A/initrd.img", "terrarium/A/terrarium.efi"},
		{Slot("c"), false, SlotA, LabelSlotA, "terrarium-c", "terrarium/c/vmlinuz", "terrarium/c/initrd.img", "terrarium/c/terrarium.efi"},
	}
	for _, tt := range tests {
		t.Run("slot "+string(tt.slot), func(t *testing.T) {
			assert.Equal(t, tt.valid, tt.slot.Valid(), "Valid()")
			assert.Equal(t, tt.other, tt.slot.Other(), "Other()")
			assert.Equal(t, tt.label, tt.slot.Label(), "Label()")
			assert.Equal(t, tt.entryID, tt.slot.EntryID(), "EntryID()")
			assert.Equal(t, tt.kernel, tt.slot.KernelPath(), "KernelPath()")
			assert.Equal(t, tt.init, tt.slot.InitrdPath(), "InitrdPath()")
			assert.Equal(t, tt.uki, tt.slot.UKIPath())
		})
	}
	for _, s := range Slots() {
		assert.Equal(t, s, s.Other().Other(), "Slot(%q).Other().Other()", s)
		assert.NotEqual(t, s, s.Other(), "Slot(%q).Other() is itself", s)
	}
	assert.Equal(t, []Slot{SlotA, SlotB}, Slots(), "Slots()")
}

func TestLabelsFitFAT(t *testing.T) {
	// FAT volume labels hold at most 11 characters.
	for _, l := range []string{LabelESPFS, LabelConfigFAT} {
		assert.LessOrEqual(t, len(l), 11, "FAT label %q is longer than 11 characters", l)
	}
	assert.True(t, strings.HasPrefix(LabelConfig, LabelConfigFAT),
		"LabelConfigFAT %q is not LabelConfig %q cut to 11 characters", LabelConfigFAT, LabelConfig)
	assert.Len(t, LabelConfigFAT, 11,
		"LabelConfigFAT %q is not LabelConfig %q cut to 11 characters", LabelConfigFAT, LabelConfig)
}

func TestStableGUID(t *testing.T) {
	guidRE := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	inputs := []struct{ image, name string }{
		{"img1", "disk"},
		{"img1", "part:EFI"},
		{"img1", "part:TERRA-A"},
		{"img1", "part:TERRA-B"},
		{"img2", "disk"},
		{"img2", "part:EFI"},
		{"", ""},
		// The separator keeps these apart although the concatenations match.
		{"img1d", "isk"},
		{"img1\x00disk", ""},
	}
	seen := map[string]string{}
	for _, in := range inputs {
		t.Run(in.image+"/"+in.name, func(t *testing.T) {
			g := StableGUID(in.image, in.name)
			assert.Equal(t, g, StableGUID(in.image, in.name), "not deterministic")
			assert.Regexp(t, guidRE, g, "%s is not a lowercase version-5 RFC 4122 GUID", g)
			u, err := uuid.Parse(g)
			require.NoError(t, err, "uuid.Parse(%s)", g)
			assert.Equal(t, uuid.Version(5), u.Version(), "version")
			assert.Equal(t, uuid.RFC4122, u.Variant(), "variant")
			key := in.image + "\x01" + in.name
			for other, og := range seen {
				assert.NotEqual(t, og, g, "same GUID %s as %q", g, other)
			}
			seen[key] = g
		})
	}
	// A known value (computed independently) pins the derivation: changing
	// it changes every GPT Terrarium writes, which must be deliberate.
	assert.Equal(t, "478094a0-3551-5081-b4be-041ac303f01d", StableGUID("img", "disk"), "StableGUID(img, disk)")
}

func TestAlignUp(t *testing.T) {
	tests := []struct{ in, want int64 }{
		{0, 0},
		{1, MiB},
		{512, MiB},
		{MiB - 1, MiB},
		{MiB, MiB},
		{MiB + 1, 2 * MiB},
		{3*MiB + 4096, 4 * MiB},
		{256 * MiB, 256 * MiB},
		{1536*MiB + 1, 1537 * MiB},
	}
	for _, tt := range tests {
		got := AlignUp(tt.in)
		assert.Equal(t, tt.want, got, "AlignUp(%d)", tt.in)
		// got is the next multiple of Alignment: a multiple, not below
		// the input, and less than one Alignment above it.
		assert.Zero(t, got%Alignment, "AlignUp(%d) = %d is not a multiple of %d", tt.in, got, Alignment)
		assert.GreaterOrEqual(t, got, tt.in, "AlignUp(%d) = %d is below its input", tt.in, got)
		assert.Less(t, got-tt.in, Alignment, "AlignUp(%d) = %d is not the next multiple of %d", tt.in, got, Alignment)
	}
}

func TestSizes(t *testing.T) {
	assert.Zero(t, FirstPartitionOffset%Alignment, "FirstPartitionOffset %d not aligned to %d", FirstPartitionOffset, Alignment)
	assert.Zero(t, GPTReserve%Alignment, "GPTReserve %d not aligned to %d", GPTReserve, Alignment)
	assert.Zero(t, Alignment%SectorSize, "Alignment %d is not a multiple of the sector size %d", Alignment, SectorSize)
	// The GPT (protective MBR, header, 128 entries of 128 bytes) must fit
	// before the first partition and after the last.
	gpt := int64(SectorSize*2 + 128*128)
	assert.GreaterOrEqual(t, FirstPartitionOffset, gpt, "GPT of %d bytes does not fit before the first partition at %d", gpt, FirstPartitionOffset)
	assert.GreaterOrEqual(t, GPTReserve, gpt-SectorSize, "backup GPT of %d bytes does not fit in the reserve of %d", gpt-SectorSize, GPTReserve)
}

// TestContractDocumented: every path and label of the on-disk contract is
// in docs/on-disk-contract.md, so the page cannot fall behind the code.
func TestContractDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/on-disk-contract.md")
	require.NoError(t, err)
	for _, name := range []string{
		LabelESP, LabelSlotA, LabelSlotB, LabelState, LabelConfig, LabelConfigFAT, LabelStateFS,
		TypeESP, TypeRootX86_64, TypeVar,
		ESPBootloader, ESPSystemdBoot, ESPLoaderConf, ESPEntriesDir, ESPEnrollKeysDir,
		CmdlineSlot, CmdlineResetState, CmdlineRescue,
		ReleaseFile, StateMount, EmbeddedConfig, BundleDir, RegistryConfigFile, LabelBundle, LabelBundleFAT,
		InitramfsModulesDir, InitramfsModulesOrder, InitramfsBusybox, ConfigFile, ConfigSignatureFile,
		StateVarDir, StateEtcUpper, StateJournal, StateNodeConfig, StateMarkerFile,
		StateResetRequest, StateUpgradeRequest, StateUpgradeResult, StateUnpackWindow, ContainerdRoot, StatusFile, KubeletClientCert, BundleIndexSignature, BundleRepositoryAnnotation, RegistryCacheDir, RegistryMountDir,
		RegistryPreviousSlotDir, RunTrialBoot, BundleReplacesAnnotation, RegistrySideloadLog,
		LabelSupport, LabelSupportFAT, UpgradeKeysFile, LabelUpgrade, LabelUpgradeFAT, SlotIndexFile, RunInPlaceSlot, InPlaceSlotDir,
	} {
		assert.Contains(t, string(doc), name, "docs/on-disk-contract.md does not mention %q", name)
	}
}

// The registry's sandbox leaves writable only the directories its unit
// names, which must be the ones the registry uses.
func TestRegistryUnitNamesItsDirectories(t *testing.T) {
	unit, err := os.ReadFile("../../../os/overlay/etc/systemd/system/terrarium-registry.service")
	require.NoError(t, err)
	settings := map[string]string{}
	for _, line := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(k, "#") {
			settings[k] = v
		}
	}
	assert.Equal(t, RegistryCacheDir, "/var/lib/"+settings["StateDirectory"])
	assert.Equal(t, []string{RegistryMountDir, RegistryPreviousSlotDir}, prefixed("/run/", strings.Fields(settings["RuntimeDirectory"])))
	assert.Equal(t, "strict", settings["ProtectSystem"], "the rest is read-only")
	assert.Equal(t, RegistryConfigFile, settings["ConditionPathExists"], "it starts at boot once firstboot configured it")
}

func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

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
			if got := tt.slot.EntryFile(tt.tries); got != tt.want {
				t.Errorf("Slot(%q).EntryFile(%d) = %q, want %q", tt.slot, tt.tries, got, tt.want)
			}
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
	}{
		{SlotA, true, SlotB, LabelSlotA, "terrarium-a", "terrarium/a/vmlinuz", "terrarium/a/initrd.img"},
		{SlotB, true, SlotA, LabelSlotB, "terrarium-b", "terrarium/b/vmlinuz", "terrarium/b/initrd.img"},
		// Invalid slots are not slots, but Other and Label still give
		// answers that never name a third partition.
		{Slot(""), false, SlotA, LabelSlotA, "terrarium-", "terrarium//vmlinuz", "terrarium//initrd.img"},
		{Slot("A"), false, SlotA, LabelSlotA, "terrarium-A", "terrarium/A/vmlinuz", "terrarium/A/initrd.img"},
		{Slot("c"), false, SlotA, LabelSlotA, "terrarium-c", "terrarium/c/vmlinuz", "terrarium/c/initrd.img"},
	}
	for _, tt := range tests {
		t.Run("slot "+string(tt.slot), func(t *testing.T) {
			if got := tt.slot.Valid(); got != tt.valid {
				t.Errorf("Valid() = %v, want %v", got, tt.valid)
			}
			if got := tt.slot.Other(); got != tt.other {
				t.Errorf("Other() = %q, want %q", got, tt.other)
			}
			if got := tt.slot.Label(); got != tt.label {
				t.Errorf("Label() = %q, want %q", got, tt.label)
			}
			if got := tt.slot.EntryID(); got != tt.entryID {
				t.Errorf("EntryID() = %q, want %q", got, tt.entryID)
			}
			if got := tt.slot.KernelPath(); got != tt.kernel {
				t.Errorf("KernelPath() = %q, want %q", got, tt.kernel)
			}
			if got := tt.slot.InitrdPath(); got != tt.init {
				t.Errorf("InitrdPath() = %q, want %q", got, tt.init)
			}
		})
	}
	for _, s := range Slots() {
		if s.Other().Other() != s {
			t.Errorf("Slot(%q).Other().Other() = %q", s, s.Other().Other())
		}
		if s.Other() == s {
			t.Errorf("Slot(%q).Other() is itself", s)
		}
	}
	if got := Slots(); len(got) != 2 || got[0] != SlotA || got[1] != SlotB {
		t.Errorf("Slots() = %v, want [a b]", got)
	}
}

func TestLabelsFitFAT(t *testing.T) {
	// FAT volume labels hold at most 11 characters.
	for _, l := range []string{LabelESPFS, LabelConfigFAT} {
		if len(l) > 11 {
			t.Errorf("FAT label %q is longer than 11 characters", l)
		}
	}
	if !strings.HasPrefix(LabelConfig, LabelConfigFAT) || len(LabelConfigFAT) != 11 {
		t.Errorf("LabelConfigFAT %q is not LabelConfig %q cut to 11 characters", LabelConfigFAT, LabelConfig)
	}
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
			if again := StableGUID(in.image, in.name); again != g {
				t.Errorf("not deterministic: %s then %s", g, again)
			}
			if !guidRE.MatchString(g) {
				t.Errorf("%s is not a lowercase version-5 RFC 4122 GUID", g)
			}
			u, err := uuid.Parse(g)
			if err != nil {
				t.Fatalf("uuid.Parse(%s): %v", g, err)
			}
			if u.Version() != 5 {
				t.Errorf("version %d, want 5", u.Version())
			}
			if u.Variant() != uuid.RFC4122 {
				t.Errorf("variant %v, want RFC 4122", u.Variant())
			}
			key := in.image + "\x01" + in.name
			for other, og := range seen {
				if og == g {
					t.Errorf("same GUID %s as %q", g, other)
				}
			}
			seen[key] = g
		})
	}
	// A known value (computed independently) pins the derivation: changing
	// it changes every GPT Terrarium writes, which must be deliberate.
	if got, want := StableGUID("img", "disk"), "478094a0-3551-5081-b4be-041ac303f01d"; got != want {
		t.Errorf("StableGUID(img, disk) = %s, want %s", got, want)
	}
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
		if got := AlignUp(tt.in); got != tt.want {
			t.Errorf("AlignUp(%d) = %d, want %d", tt.in, got, tt.want)
		}
		if got := AlignUp(tt.in); got%Alignment != 0 || got < tt.in || got-tt.in >= Alignment {
			t.Errorf("AlignUp(%d) = %d is not the next multiple of %d", tt.in, got, Alignment)
		}
	}
}

func TestSizes(t *testing.T) {
	if FirstPartitionOffset%Alignment != 0 || GPTReserve%Alignment != 0 {
		t.Errorf("FirstPartitionOffset %d or GPTReserve %d not aligned to %d", FirstPartitionOffset, GPTReserve, Alignment)
	}
	if Alignment%SectorSize != 0 {
		t.Errorf("Alignment %d is not a multiple of the sector size %d", Alignment, SectorSize)
	}
	// The GPT (protective MBR, header, 128 entries of 128 bytes) must fit
	// before the first partition and after the last.
	if gpt := int64(SectorSize*2 + 128*128); FirstPartitionOffset < gpt || GPTReserve < gpt-SectorSize {
		t.Errorf("GPT of %d bytes does not fit in %d / %d", gpt, FirstPartitionOffset, GPTReserve)
	}
}

// TestContractDocumented: every path and label of the on-disk contract is
// in docs/on-disk-contract.md, so the page cannot fall behind the code.
func TestContractDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/on-disk-contract.md")
	require.NoError(t, err)
	for _, name := range []string{
		LabelESP, LabelSlotA, LabelSlotB, LabelState, LabelConfig, LabelConfigFAT, LabelStateFS,
		TypeESP, TypeRootX86_64, TypeVar,
		ESPBootloader, ESPSystemdBoot, ESPLoaderConf, ESPEntriesDir,
		CmdlineSlot, CmdlineResetState, CmdlineRescue,
		ReleaseFile, StateMount, EmbeddedConfig, BundleDir, RegistryConfigFile, LabelBundle, LabelBundleFAT,
		InitramfsModulesDir, InitramfsModulesOrder, InitramfsBusybox, ConfigFile, ConfigSignatureFile,
		StateVarDir, StateEtcUpper, StateJournal, StateNodeConfig, StateMarkerFile,
		StateResetRequest, StateUpgradeRequest, StateUpgradeResult, StateUnpackWindow, ContainerdRoot, StatusFile, KubeletClientCert, BundleIndexSignature, BundleRepositoryAnnotation, RegistryCacheDir, RegistryMountDir,
		RegistryPreviousSlotDir, RunTrialBoot, BundleReplacesAnnotation, RegistrySideloadLog,
		LabelSupport, LabelSupportFAT, UpgradeKeysFile, LabelUpgrade, LabelUpgradeFAT,
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

package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/image/rootfs"
	"github.com/terrarium-os/terrarium/pkg/image/secureboot"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

// signedBoot is what the Secure Boot stage wrote into the work directory:
// the signed boot loader, each slot's signed UKI and the enrollment files.
type signedBoot struct {
	sdboot string
	// ukis are the UKIs of the slots the image holds, for its ESP;
	// upgradeUKIs both slots', for its upgrade file.
	ukis, upgradeUKIs map[layout.Slot]string
	// liveUKI is the ISO's live entry's UKI ("" without an iso output).
	liveUKI    string
	enrollKeys map[string]string // file name → host path
	manifest   *SecureBootInfo
}

// SecureBootInfo is the manifest's record of a Secure Boot image.
type SecureBootInfo struct {
	// Site is the key set's site name (its PK certificate's organization).
	Site string `json:"site"`
	// DBCertSHA256 is the SHA-256 of the db certificate (DER) that signed
	// the boot loader and the UKIs: the certificate a machine's db must
	// hold.
	DBCertSHA256 string `json:"dbCertSHA256"`
	// Enroll is loader.conf's secure-boot-enroll.
	Enroll string `json:"enroll"`
	// UKIs are each slot's signed unified kernel image (on the ESP when
	// the image holds the slot, and in the upgrade file), which the same
	// inputs and key make again byte for byte.
	UKIs map[layout.Slot]Output `json:"ukis"`
	// LiveUKI is the ISO's live UKI (slot A's root filesystem, booted
	// from the ISO), when the build writes an ISO.
	LiveUKI *Output `json:"liveUKI,omitempty"`
}

// signBoot writes, for a spec with secureBoot, each slot's UKI (the
// image's systemd-stub with the kernel, the initramfs, the slot's command
// line and os-release), signs the UKIs and systemd-boot with the site's db
// key, and writes the enrollment files at the build's epoch.
func signBoot(ctx context.Context, s *spec.Spec, base *rootfs.Base, boot bootFiles, slots map[layout.Slot]string, work string) (*signedBoot, error) {
	ks, err := s.SecureBootKeys()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(work, "secureboot")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	stub, err := base.ExtractStub(ctx, dir)
	if err != nil {
		return nil, err
	}
	db := ks.Key(secureboot.DB)
	sb := &signedBoot{
		ukis: map[layout.Slot]string{}, upgradeUKIs: map[layout.Slot]string{},
		manifest: &SecureBootInfo{
			Site: ks.Site, Enroll: s.SecureBoot.Enroll, UKIs: map[layout.Slot]Output{},
			DBCertSHA256: hexSHA256(db.Cert.Raw),
		},
	}
	uki := func(name, cmdline, osrel string) (string, Output, error) {
		unsigned := filepath.Join(dir, name+".unsigned.efi")
		err := secureboot.WriteUKI(secureboot.UKI{
			Stub: stub, Kernel: boot.kernel, Initrd: boot.initrd,
			Cmdline: cmdline, OSRelease: osrel, Uname: boot.kernelVersion,
		}, unsigned)
		if err != nil {
			return "", Output{}, err
		}
		signed := filepath.Join(dir, name+".efi")
		if err := secureboot.SignPE(ctx, db, unsigned, signed); err != nil {
			return "", Output{}, err
		}
		sum, size, err := fileSHA256(signed)
		return signed, Output{Size: size, SHA256: sum}, err
	}
	for _, slot := range layout.Slots() {
		signed, out, err := uki("terrarium-"+string(slot), strings.Join(slot.Cmdline(s.Kernel.Cmdline), " "), osRelease(s.Version, slot))
		if err != nil {
			return nil, fmt.Errorf("slot %s: %w", slot, err)
		}
		out.File = slot.UKIPath()
		sb.manifest.UKIs[slot] = out
		sb.upgradeUKIs[slot] = signed
		if _, ok := slots[slot]; ok {
			sb.ukis[slot] = signed
		}
	}
	if s.WantsOutput(spec.OutputISO) {
		live, out, err := uki("terrarium-live", strings.Join(layout.SlotA.Cmdline(liveCmdline(s)), " "),
			fmt.Sprintf("NAME=\"Terrarium\"\nID=terrarium\nVERSION_ID=%s\nPRETTY_NAME=\"Terrarium %s (live)\"\n", s.Version, s.Version))
		if err != nil {
			return nil, fmt.Errorf("the ISO's live UKI: %w", err)
		}
		out.File = layout.SlotA.UKIPath()
		sb.liveUKI, sb.manifest.LiveUKI = live, &out
	}
	sb.sdboot = filepath.Join(dir, "systemd-bootx64.efi")
	if err := secureboot.SignPE(ctx, db, boot.sdboot, sb.sdboot); err != nil {
		return nil, fmt.Errorf("systemd-boot: %w", err)
	}
	if s.SecureBoot.Enroll != spec.EnrollOff {
		extra, err := s.SecureBootExtraDB()
		if err != nil {
			return nil, err
		}
		keys := filepath.Join(dir, "keys")
		if err := ks.WriteEnrollment(keys, s.Epoch(), secureboot.WithExtraDB(extra...)); err != nil {
			return nil, err
		}
		sb.enrollKeys = map[string]string{}
		for _, r := range secureboot.Roles() {
			sb.enrollKeys[secureboot.AuthFile(r)] = filepath.Join(keys, secureboot.AuthFile(r))
		}
	}
	return sb, nil
}

// slotUKIs are the signed UKIs an upgrade file carries: one per slot,
// whether or not this image's slot B holds a build (an upgrade may go to
// either slot); nil without Secure Boot.
func (sb *signedBoot) slotUKIs() map[layout.Slot]string {
	if sb == nil {
		return nil
	}
	return sb.upgradeUKIs
}

// note is the Secure Boot stage's progress note.
func (sb *signedBoot) note() string {
	return fmt.Sprintf("site %s, %d UKIs signed", sb.manifest.Site, len(sb.ukis))
}

// osRelease is a UKI's .osrel: what systemd-boot shows of it.
func osRelease(version string, slot layout.Slot) string {
	return fmt.Sprintf("NAME=\"Terrarium\"\nID=terrarium\nVERSION_ID=%s\nPRETTY_NAME=\"Terrarium %s (slot %s)\"\n", version, version, slot)
}

func hexSHA256(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

#!/usr/bin/env bash
# Installs the Debian packages Terrarium's build and tests need. Idempotent:
# a machine that already has them does no work and touches no network.
set -euo pipefail

pkgs=(
  mmdebstrap          # trixie rootfs
  squashfs-tools      # mksquashfs / unsquashfs (slot images)
  qemu-utils          # qemu-img (qcow2)
  qemu-system-x86     # QEMU under TCG for the boot tests
  qemu-user           # qemu-x86_64: TLS handshake cost under TCG (bench-cluster)
  ovmf                # UEFI firmware for QEMU
  gdisk               # sgdisk -v (validating our GPT)
  dosfstools          # mkfs.fat (the ESPs), fsck.fat -n (validating them and config disks)
  mtools              # mcopy: files into the ESPs
  xorriso             # hybrid ISO
  e2fsprogs           # debugfs/e2fsck for inspecting STATE in tests
  exfatprogs          # mkfs.exfat: sticks the node accepts (pkg/node/config/media tests)
  btrfs-progs         # mkfs.btrfs, xfsprogs, ntfs-3g: filesystems a stick is refused
  xfsprogs            #   for, made by the real formatters in the media tests
  ntfs-3g
  zstd
  skopeo              # a real registry client for the registry tests
  containerd          # ctr: containerd pulling through our registry in tests
  gcc                 # cgo: runc (components/runc)
  pkg-config          # cgo: runc finds libseccomp
  libseccomp-dev      # runc's seccomp support
  sbsigntool          # sbsign/sbverify: Secure Boot signatures on systemd-boot and the UKIs
  efitools            # cert-to-efi-sig-list, sign-efi-sig-list: the tests' check of our .esl/.auth
  binutils            # objdump: the tests' second reader of our UKIs
  systemd-boot-efi    # a systemd-stub and systemd-boot for pkg/image/secureboot's tests
  swtpm               # a software TPM 2.0: pkg/node/boot/tpmseal's tests, a VM's TPM in QEMU
  swtpm-tools         # swtpm_setup: a VM's TPM made like a machine's (an endorsement key)
  cryptsetup-bin      # cryptsetup: the LUKS2 volumes of statecrypt's and localvolumes' tests
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "deps: all ${#pkgs[@]} Debian packages present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"

package ova

import (
	"encoding/xml"
	"fmt"
	"strconv"
)

// The OVF 1.x envelope, as encoding/xml structs. Prefixed names are
// written literally; the envelope declares the prefixes. Within an Item
// the rasd elements are in the schema's (alphabetical) order, which
// vSphere's parser checks.
const (
	nsOVF  = "http://schemas.dmtf.org/ovf/envelope/1"
	nsRASD = "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData"
	nsVSSD = "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_VirtualSystemSettingData"
	nsVMW  = "http://www.vmware.com/schema/ovf"

	// DiskFormat is the OVF disk format URI of a streamOptimized VMDK.
	DiskFormat = "http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"
)

type envelope struct {
	XMLName    xml.Name       `xml:"Envelope"`
	NS         string         `xml:"xmlns,attr"`
	NSOVF      string         `xml:"xmlns:ovf,attr"`
	NSRASD     string         `xml:"xmlns:rasd,attr"`
	NSVMW      string         `xml:"xmlns:vmw,attr"`
	NSVSSD     string         `xml:"xmlns:vssd,attr"`
	References []fileRef      `xml:"References>File"`
	Disks      diskSection    `xml:"DiskSection"`
	Networks   networkSection `xml:"NetworkSection"`
	System     virtualSystem  `xml:"VirtualSystem"`
}

type fileRef struct {
	Href string `xml:"ovf:href,attr"`
	ID   string `xml:"ovf:id,attr"`
	Size int64  `xml:"ovf:size,attr"`
}

type diskSection struct {
	Info  string     `xml:"Info"`
	Disks []diskDesc `xml:"Disk"`
}

type diskDesc struct {
	Capacity      int64  `xml:"ovf:capacity,attr"`
	Units         string `xml:"ovf:capacityAllocationUnits,attr"`
	DiskID        string `xml:"ovf:diskId,attr"`
	FileRef       string `xml:"ovf:fileRef,attr"`
	Format        string `xml:"ovf:format,attr"`
	PopulatedSize int64  `xml:"ovf:populatedSize,attr,omitempty"`
}

type networkSection struct {
	Info     string    `xml:"Info"`
	Networks []network `xml:"Network"`
}

type network struct {
	Name        string `xml:"ovf:name,attr"`
	Description string `xml:"Description"`
}

type virtualSystem struct {
	ID       string                 `xml:"ovf:id,attr"`
	Info     string                 `xml:"Info"`
	Name     string                 `xml:"Name"`
	OS       operatingSystemSection `xml:"OperatingSystemSection"`
	Hardware hardwareSection        `xml:"VirtualHardwareSection"`
	Product  productSection         `xml:"ProductSection"`
}

type operatingSystemSection struct {
	ID     int    `xml:"ovf:id,attr"`
	OSType string `xml:"vmw:osType,attr"`
	Info   string `xml:"Info"`
}

type hardwareSection struct {
	Transport string      `xml:"ovf:transport,attr"`
	Info      string      `xml:"Info"`
	System    system      `xml:"System"`
	Items     []item      `xml:"Item"`
	Config    []vmwConfig `xml:"vmw:Config"`
}

type system struct {
	ElementName string `xml:"vssd:ElementName"`
	InstanceID  int    `xml:"vssd:InstanceID"`
	Identifier  string `xml:"vssd:VirtualSystemIdentifier"`
	Type        string `xml:"vssd:VirtualSystemType"`
}

type item struct {
	Required            string      `xml:"ovf:required,attr,omitempty"`
	Address             string      `xml:"rasd:Address,omitempty"`
	AddressOnParent     string      `xml:"rasd:AddressOnParent,omitempty"`
	AllocationUnits     string      `xml:"rasd:AllocationUnits,omitempty"`
	AutomaticAllocation string      `xml:"rasd:AutomaticAllocation,omitempty"`
	Connection          string      `xml:"rasd:Connection,omitempty"`
	Description         string      `xml:"rasd:Description,omitempty"`
	ElementName         string      `xml:"rasd:ElementName"`
	HostResource        string      `xml:"rasd:HostResource,omitempty"`
	InstanceID          int         `xml:"rasd:InstanceID"`
	Parent              string      `xml:"rasd:Parent,omitempty"`
	ResourceSubType     string      `xml:"rasd:ResourceSubType,omitempty"`
	ResourceType        int         `xml:"rasd:ResourceType"`
	VirtualQuantity     int         `xml:"rasd:VirtualQuantity,omitempty"`
	Config              []vmwConfig `xml:"vmw:Config"`
}

type vmwConfig struct {
	Required string `xml:"ovf:required,attr"`
	Key      string `xml:"vmw:key,attr"`
	Value    string `xml:"vmw:value,attr"`
}

type productSection struct {
	Required    string         `xml:"ovf:required,attr"`
	Info        string         `xml:"Info"`
	Product     string         `xml:"Product"`
	Version     string         `xml:"Version,omitempty"`
	FullVersion string         `xml:"FullVersion,omitempty"`
	Entries     []productEntry // Category and Property elements, in order
}

// productEntry is a Category or a Property of a ProductSection: a
// Category heads the properties after it in the deploy wizard.
type productEntry interface{ productEntry() }

type category struct {
	XMLName xml.Name `xml:"Category"`
	Text    string   `xml:",chardata"`
}

type property struct {
	XMLName          xml.Name `xml:"Property"`
	Key              string   `xml:"ovf:key,attr"`
	Type             string   `xml:"ovf:type,attr"`
	UserConfigurable bool     `xml:"ovf:userConfigurable,attr"`
	Value            string   `xml:"ovf:value,attr"`
	Label            string   `xml:"Label"`
	Description      string   `xml:"Description"`
}

func (category) productEntry() {}
func (property) productEntry() {}

// CIM resource types of the items.
const (
	resourceCPU        = 3
	resourceMemory     = 4
	resourceNIC        = 10
	resourceCDROM      = 15
	resourceDisk       = 17
	resourceOtherStore = 20 // SATA (vmware.sata.ahci) and NVMe controllers
)

// The OVF ids the envelope's parts refer to each other by.
const (
	fileID      = "file1"
	diskID      = "vmdisk1"
	networkName = "VM Network"
	sataID      = 3
)

// newEnvelope describes one VM: name, its disk (file size, capacity and
// populated bytes) and the options.
func newEnvelope(name string, disk Disk, o options) envelope {
	return envelope{
		NS: nsOVF, NSOVF: nsOVF, NSRASD: nsRASD, NSVMW: nsVMW, NSVSSD: nsVSSD,
		References: []fileRef{{Href: name + ".vmdk", ID: fileID, Size: disk.Size}},
		Disks: diskSection{
			Info: "Virtual disk information",
			Disks: []diskDesc{{
				Capacity: disk.Capacity, Units: "byte", DiskID: diskID, FileRef: fileID,
				Format: DiskFormat, PopulatedSize: disk.Populated,
			}},
		},
		Networks: networkSection{
			Info:     "The list of logical networks",
			Networks: []network{{Name: networkName, Description: "The network of the first network adapter"}},
		},
		System: virtualSystem{
			ID: name, Info: "A Terrarium node", Name: name,
			// 101 is CIM's "Linux 64-Bit"; vSphere goes by vmw:osType,
			// "Other 3.x or later Linux (64-bit)", known since ESXi 6.5.
			OS:       operatingSystemSection{ID: 101, OSType: "other3xLinux64Guest", Info: "The kind of installed guest operating system"},
			Hardware: hardware(name, o),
			Product:  product(o),
		},
	}
}

// hardware is VMware's usual devices for an EFI Linux guest. The disk sits
// on a SATA (AHCI) controller: vSphere deploys it on every hardware
// version from vmx-10, boots EFI from it, and the initramfs loads ahci
// (pkg/image/initramfs) but neither vmw_pvscsi nor mptspi, which a
// ParaVirtual or LSI Logic SCSI disk would need (vSphere's HTML client
// also refused "VirtualSCSI" for some guest types, siderolabs/talos#3515).
// The CD-ROM drive carries the OVF environment when the transport is
// "iso", and config media (TERRA-CONFIG, CIDATA, config-2).
func hardware(name string, o options) hardwareSection {
	notRequired := "false"
	return hardwareSection{
		// vSphere hands the vApp properties to the guest through VMware
		// Tools (guestinfo.ovfEnv, read with vmware-rpctool) and, when
		// asked, on a CD (ovf-env.xml).
		Transport: "com.vmware.guestInfo iso",
		Info:      "Virtual hardware requirements",
		System: system{
			ElementName: "Virtual Hardware Family", InstanceID: 0, Identifier: name,
			Type: "vmx-" + strconv.Itoa(o.hardwareVersion),
		},
		Items: []item{
			{
				AllocationUnits: "hertz * 10^6", Description: "Number of Virtual CPUs",
				ElementName: fmt.Sprintf("%d virtual CPU(s)", o.cpus), InstanceID: 1,
				ResourceType: resourceCPU, VirtualQuantity: o.cpus,
			},
			{
				AllocationUnits: "byte * 2^20", Description: "Memory Size",
				ElementName: fmt.Sprintf("%d MB of memory", o.memoryMiB), InstanceID: 2,
				ResourceType: resourceMemory, VirtualQuantity: o.memoryMiB,
			},
			{
				Address: "0", Description: "SATA Controller", ElementName: "SATA controller 0",
				InstanceID: sataID, ResourceSubType: "vmware.sata.ahci", ResourceType: resourceOtherStore,
			},
			{
				AddressOnParent: "0", ElementName: "Hard disk 1", HostResource: "ovf:/disk/" + diskID,
				InstanceID: 4, Parent: strconv.Itoa(sataID), ResourceType: resourceDisk,
			},
			{
				Required: notRequired, AddressOnParent: "1", AutomaticAllocation: "false",
				ElementName: "CD/DVD drive 1", InstanceID: 5, Parent: strconv.Itoa(sataID),
				ResourceSubType: "vmware.cdrom.remotepassthrough", ResourceType: resourceCDROM,
			},
			{
				AddressOnParent: "7", AutomaticAllocation: "true", Connection: networkName,
				Description: "VmxNet3 ethernet adapter on " + networkName,
				ElementName: "Network adapter 1", InstanceID: 6,
				ResourceSubType: "VmxNet3", ResourceType: resourceNIC,
			},
		},
		Config: []vmwConfig{
			{Required: notRequired, Key: "firmware", Value: "efi"},
			// The boot chain (systemd-boot, the kernel) is not signed
			// with a key UEFI trusts.
			{Required: notRequired, Key: "bootOptions.efiSecureBootEnabled", Value: "false"},
		},
	}
}

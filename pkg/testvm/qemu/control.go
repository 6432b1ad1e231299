package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/terrarium-os/terrarium/pkg/testvm/qmp"
)

// QMP returns the VM's QMP client, connecting on first use. The connection
// is made once: after it drops (QEMU exited) QMP returns an error.
func (v *VM) QMP(ctx context.Context) (*qmp.Client, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	// Once the process has been reaped the socket is gone, whether or not
	// the connection's reader has seen its EOF yet.
	if !v.Running() {
		return nil, fmt.Errorf("qmp: QEMU exited (%s)", v.cmd.ProcessState)
	}
	if v.qmp != nil {
		select {
		case <-v.qmp.Done():
			return nil, fmt.Errorf("qmp: %w", v.qmp.Err())
		default:
			return v.qmp, nil
		}
	}
	// Stop retrying as soon as QEMU exits.
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-v.exited:
			cancel()
		case <-dctx.Done():
		}
	}()
	c, err := qmp.Dial(dctx, filepath.Join(v.cfg.Dir, QMPSocket), qmp.WithLogger(v.log))
	if err != nil {
		if !v.Running() {
			return nil, fmt.Errorf("%w: QEMU exited", err)
		}
		return nil, err
	}
	v.qmp = c
	return c, nil
}

// execute runs a QMP command on the VM's connection.
func (v *VM) execute(ctx context.Context, cmd string, args, result any) error {
	c, err := v.QMP(ctx)
	if err != nil {
		return err
	}
	return c.Execute(ctx, cmd, args, result)
}

// Status returns the run state from query-status, e.g. "running".
func (v *VM) Status(ctx context.Context) (string, error) {
	var st struct {
		Status string `json:"status"`
	}
	if err := v.execute(ctx, "query-status", nil, &st); err != nil {
		return "", err
	}
	return st.Status, nil
}

// Reset resets the machine (system_reset), like pressing the reset button.
func (v *VM) Reset(ctx context.Context) error {
	return v.execute(ctx, "system_reset", nil, nil)
}

// Quit asks QEMU to exit (QMP quit) and waits for it to do so.
func (v *VM) Quit(ctx context.Context) error {
	err := v.execute(ctx, "quit", nil, nil)
	// QEMU may close the connection before its reply gets through.
	if err != nil && !errors.Is(err, qmp.ErrClosed) {
		return fmt.Errorf("qemu quit: %w", err)
	}
	if err := v.Wait(ctx); err != nil {
		return fmt.Errorf("qemu quit: %w", err)
	}
	return nil
}

// HotplugDisk attaches d to the running machine: blockdev-add of its file
// and format nodes, then device_add (usb-storage on xhci.0 for BusUSB,
// otherwise on a free pcie-root-port). d.ID is required.
func (v *VM) HotplugDisk(ctx context.Context, d Disk) error {
	if d.ID == "" {
		return errors.New("qemu hotplug: Disk.ID is required")
	}
	if err := d.validate(); err != nil {
		return fmt.Errorf("qemu hotplug: %w", err)
	}
	if d.Bus == BusCDROM {
		return fmt.Errorf("qemu hotplug %s: a CD-ROM drive is attached at start (Config.Disks)", d.ID)
	}
	port := ""
	if d.Bus != BusUSB {
		var err error
		if port, err = v.claimPort(d.ID); err != nil {
			return fmt.Errorf("qemu hotplug %s: %w", d.ID, err)
		}
	}
	var added []string
	err := func() error {
		for _, node := range d.blockdevs() {
			if err := v.execute(ctx, "blockdev-add", node, nil); err != nil {
				return err
			}
			added = append(added, node["node-name"].(string))
		}
		return v.execute(ctx, "device_add", d.deviceProps(port), nil)
	}()
	if err != nil {
		v.deleteNodes(ctx, added)
		v.releasePort(d.ID)
		return fmt.Errorf("qemu hotplug %s: %w", d.ID, err)
	}
	v.log.Debug("hot-plugged disk", "id", d.ID, "bus", d.Bus.String(), "port", port)
	return nil
}

// UnplugDisk detaches the disk with the given id (hot-plugged, or a USB disk
// from Config.Disks): device_del, wait for DEVICE_DELETED, then blockdev-del
// of its nodes. PCI devices need the guest's cooperation to go away.
func (v *VM) UnplugDisk(ctx context.Context, id string) error {
	c, err := v.QMP(ctx)
	if err != nil {
		return fmt.Errorf("qemu unplug %s: %w", id, err)
	}
	deleted := func(e qmp.Event) bool {
		var data struct {
			Device string `json:"device"`
		}
		return e.Name == "DEVICE_DELETED" && json.Unmarshal(e.Data, &data) == nil && data.Device == id
	}
	// Forget stale events for this id (from an earlier, abandoned unplug).
	done, cancel := context.WithCancel(ctx)
	cancel()
	for {
		if _, err := c.WaitEventFunc(done, deleted); err != nil {
			break
		}
	}
	if err := c.Execute(ctx, "device_del", map[string]string{"id": id}, nil); err != nil {
		return fmt.Errorf("qemu unplug %s: %w", id, err)
	}
	if _, err := c.WaitEventFunc(ctx, deleted); err != nil {
		return fmt.Errorf("qemu unplug %s: waiting for DEVICE_DELETED: %w", id, err)
	}
	v.releasePort(id)
	d := Disk{ID: id}
	for _, node := range []string{d.formatNode(), d.fileNode()} {
		if err := c.Execute(ctx, "blockdev-del", map[string]string{"node-name": node}, nil); err != nil {
			return fmt.Errorf("qemu unplug %s: %w", id, err)
		}
	}
	return nil
}

// deleteNodes removes block nodes, newest first, ignoring errors: it undoes
// a failed hot-plug, possibly after ctx has ended.
func (v *VM) deleteNodes(ctx context.Context, nodes []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for i := len(nodes) - 1; i >= 0; i-- {
		if err := v.execute(ctx, "blockdev-del", map[string]string{"node-name": nodes[i]}, nil); err != nil {
			v.log.Warn("undoing hot-plug", "node", nodes[i], "err", err)
		}
	}
}

func (v *VM) claimPort(id string) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, used := range v.ports {
		if used == id {
			return "", fmt.Errorf("device %s is already plugged into %s", id, hotplugPort(i))
		}
	}
	for i, used := range v.ports {
		if used == "" {
			v.ports[i] = id
			return hotplugPort(i), nil
		}
	}
	return "", fmt.Errorf("no free pcie-root-port (the machine has %d; see Config.HotplugPorts)", len(v.ports))
}

func (v *VM) releasePort(id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, used := range v.ports {
		if used == id {
			v.ports[i] = ""
		}
	}
}

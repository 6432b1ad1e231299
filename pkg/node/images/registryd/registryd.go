// Package registryd is `firstboot registry`: the node's long-running
// registry. It serves the slot's bundle (read-only) and the node's cache on
// loopback for containerd, on the node address over TLS for the other nodes
// when configured, fills the cache from peers on a miss, and adds bundles
// side-loaded from disks labelled TERRA-BUNDLE.
package registryd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"

	"github.com/terrarium-os/terrarium/pkg/node/boot/slotmount"
	"github.com/terrarium-os/terrarium/pkg/node/images/mirrors"
	"github.com/terrarium-os/terrarium/pkg/node/images/registry"
)

// Config is /etc/terrarium/registry.json, written by firstboot's registry
// phase from the machine config.
type Config struct {
	Serve    bool     `json:"serve,omitempty"`
	Listen   string   `json:"listen,omitempty"`
	Peers    []string `json:"peers,omitempty"`
	CAFile   string   `json:"caFile,omitempty"`
	CertFile string   `json:"certFile,omitempty"`
	KeyFile  string   `json:"keyFile,omitempty"`
	// ClientCertFile and ClientKeyFile are what the registry shows its
	// peers (the same file when it holds both, like the kubelet's). They
	// are read at each connection: the kubelet's appears when the node
	// joins, and is renewed in place.
	ClientCertFile string `json:"clientCertFile,omitempty"`
	ClientKeyFile  string `json:"clientKeyFile,omitempty"`
	// RequireSignedBundles says the node trusts a key (for any purpose),
	// so it takes a side-load bundle only when its index.json is signed
	// for bundles by one of BundleKeys; a node that trusts no key takes
	// bundles unsigned, and says so. Always written: a registry.json
	// without it is an older firstboot's (see loadConfig).
	RequireSignedBundles bool `json:"requireSignedBundles"`
	// BundleKeys (ed25519:…) are the keys the node trusts for bundles
	// (machineconfig.Config.BundleKeys): only a bundle signed by one of
	// them may replace a tag the node has.
	BundleKeys []string `json:"bundleKeys,omitempty"`
	// StateReserveBytes is the free space a side-load, or a blob fetched
	// from a peer, leaves on TERRA-STATE for etcd (machineconfig.Config.StateReserveBytes); 0:
	// machineconfig.DefaultStateReserveMiB.
	StateReserveBytes uint64 `json:"stateReserveBytes,omitempty"`

	// predatesTrust: the file is an older firstboot's, written before
	// side-loads needed signatures on nodes that trust a key.
	predatesTrust bool
}

// Options wire the daemon to its machine; Defaults has production values.
type Options struct {
	BundleDir string // the slot's OCI layout (absent: no bundle)
	// UpgradesDir is the node's upgrade share (pkg/node/images/upgradeshare),
	// which firstboot writes and the registry serves to the peers.
	UpgradesDir string
	CacheDir    string // the writable cache on TERRA-STATE
	ConfigFile  string
	Loopback    string // ip:port for containerd
	Log         *slog.Logger
	// Notify tells systemd the registry is ready (sd_notify READY=1).
	Notify func() error
	// OtherSlot serves the bundle of the slot the node did not boot
	// while a marker names it (an upgrade's trial boot, a Kubernetes run
	// in place); nil disables it.
	OtherSlot *OtherSlot
	// SideLoad watches for bundle disks; nil disables it.
	SideLoad *SideLoader
}

// Run serves until ctx ends.
func Run(ctx context.Context, o Options) error {
	cfg, err := loadConfig(o.ConfigFile)
	if err != nil {
		return err
	}
	var keys []signature.PublicKey
	for _, k := range cfg.BundleKeys {
		pk, err := signature.ParsePublicKey(k)
		if err != nil {
			return fmt.Errorf("%s: bundleKeys: %w", o.ConfigFile, err)
		}
		keys = append(keys, pk)
	}
	if cfg.predatesTrust {
		o.Log.Warn("registry: registry.json predates side-load trust (no requireSignedBundles): side-loads must be signed by its keys until firstboot rewrites it and restarts the registry",
			"config", o.ConfigFile, "keys", len(keys))
	}
	var stores []registry.Store
	cacheOpts := []registry.Option{registry.WithLogger(o.Log)}
	if _, err := os.Stat(o.BundleDir); err == nil {
		l, err := registry.OpenLayout(o.BundleDir, registry.WithLogger(o.Log))
		if err != nil {
			return fmt.Errorf("open the slot's bundle: %w", err)
		}
		stores = append(stores, l)
		// The slot's tags can never be shadowed by a side-load; the server
		// consults the bundle before the cache as well.
		cacheOpts = append(cacheOpts, registry.WithBundle(l))
	}
	if o.OtherSlot != nil {
		// Behind the slot's own: its tags are never shadowed.
		stores = append(stores, o.OtherSlot)
		go o.OtherSlot.Serve(ctx)
	}
	// The upgrade share is served as it is: a fetching peer checks every
	// blob against its digest and its installer every part against the
	// signed manifest, so that hashing it here too would only cost this
	// node, which serves every peer, a pass over each upgrade.
	var share []registry.Store
	if o.UpgradesDir != "" {
		share = append(share, registry.OpenLiveLayout(o.UpgradesDir, registry.WithLogger(o.Log)))
	}
	cache, err := registry.OpenCache(o.CacheDir, cacheOpts...)
	if err != nil {
		return fmt.Errorf("open registry cache: %w", err)
	}
	opts := []registry.Option{registry.WithStores(stores...), registry.WithReaderCheckedStores(share...), registry.WithCache(cache), registry.WithLogger(o.Log)}
	// The cluster CA checks the peers we ask and the peers that ask us.
	var pool *x509.CertPool
	if len(cfg.Peers) > 0 || cfg.Serve {
		if pool, err = loadCA(cfg.CAFile); err != nil {
			return err
		}
	}
	if len(cfg.Peers) > 0 {
		// What the peers send keeps the side-loads' reserve on STATE.
		opts = append(opts, registry.WithPeers(cfg.PeerURLs(), cfg.peerTLS(pool)), registry.WithPeerSpace(nil, cfg.stateReserve()))
	}
	srv, err := registry.New(opts...)
	if err != nil {
		return err
	}
	errs := make(chan error, 3)
	ln, err := net.Listen("tcp", o.Loopback)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.Loopback, err)
	}
	go func() { errs <- registry.Serve(ctx, ln, srv) }()
	o.Log.Info("registry: serving", "addr", o.Loopback, "bundle", o.BundleDir, "cache", o.CacheDir, "peers", cfg.Peers)
	if cfg.Serve {
		tln, err := tlsListener(ctx, cfg, pool)
		if err != nil {
			return err
		}
		go func() { errs <- registry.Serve(ctx, tln, srv) }()
		o.Log.Info("registry: serving peers over TLS", "addr", cfg.Listen)
	}
	if o.Notify != nil {
		if err := o.Notify(); err != nil {
			o.Log.Warn("registry: sd_notify", "err", err)
		}
	}
	if o.SideLoad != nil {
		o.SideLoad.RequireSigned, o.SideLoad.Keys, o.SideLoad.Reserve = cfg.RequireSignedBundles, keys, cfg.stateReserve()
		o.SideLoad.predatesTrust = cfg.predatesTrust
		go o.SideLoad.Watch(ctx, cache)
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return err
	}
}

// PeerURLs are the base URLs of the peers' registries.
func (c Config) PeerURLs() []string {
	urls := make([]string, 0, len(c.Peers))
	for _, p := range c.Peers {
		urls = append(urls, "https://"+p)
	}
	return urls
}

// peerTLS is how the registry talks to its peers: their certificates
// checked against the cluster CA in pool, the node's own shown to them.
func (c Config) peerTLS(pool *x509.CertPool) *tls.Config {
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12,
		GetClientCertificate: clientCertificate(c.ClientCertFile, c.ClientKeyFile)}
}

// PeerFetcher reads the registry configuration at path and fetches from
// the peers it names as the registry itself does (mutual TLS with the
// cluster CA): for content the node keeps beside the registry, its
// upgrade share. A node with no peers has no fetcher (an error).
func PeerFetcher(path string) (*registry.Fetcher, error) {
	cfg, err := loadConfig(path)
	if err != nil {
		return nil, err
	}
	if len(cfg.Peers) == 0 {
		return nil, fmt.Errorf("%s names no peers to fetch from", path)
	}
	pool, err := loadCA(cfg.CAFile)
	if err != nil {
		return nil, err
	}
	return registry.NewFetcher(cfg.PeerURLs(), cfg.peerTLS(pool))
}

// stateReserve is the reserve a side-load, or a blob from a peer, keeps
// on TERRA-STATE.
func (c Config) stateReserve() uint64 {
	if c.StateReserveBytes == 0 {
		return machineconfig.DefaultStateReserveMiB << 20
	}
	return c.StateReserveBytes
}

// loadConfig reads registry.json. One an older firstboot wrote (before
// requireSignedBundles) is read too: its signedBundlesOnly and
// trustedKeys become BundleKeys, and side-loads must be signed (it cannot
// say whether the node trusts a key) until firstboot rewrites it, which
// restarts the registry.
func loadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Config{}, nil // not provisioned yet: loopback only
	}
	if err != nil {
		return Config{}, fmt.Errorf("read registry config: %w", err)
	}
	var f struct {
		Config
		RequireSignedBundles *bool `json:"requireSignedBundles"`
		// An older firstboot's.
		SignedBundlesOnly bool     `json:"signedBundlesOnly"`
		TrustedKeys       []string `json:"trustedKeys"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return Config{}, fmt.Errorf("parse registry config %s: %w", path, err)
	}
	c := f.Config
	if f.RequireSignedBundles != nil {
		c.RequireSignedBundles = *f.RequireSignedBundles
		return c, nil
	}
	c.RequireSignedBundles, c.predatesTrust = true, true
	if f.SignedBundlesOnly {
		c.BundleKeys = f.TrustedKeys
	}
	return c, nil
}

func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("registry peers need the cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// errNoClientCert: the node has nothing to show its peers yet.
var errNoClientCert = errors.New("no client certificate to show the peers: a cluster node has its kubelet's once it has joined; any other node needs registry.clientCertificate and clientKey in its config")

// clientCertificate reads the certificate the registry shows its peers,
// at each handshake.
func clientCertificate(certFile, keyFile string) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if certFile == "" {
			return nil, errNoClientCert
		}
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w (%s is not there yet)", errNoClientCert, certFile)
		}
		if err != nil {
			return nil, fmt.Errorf("client certificate for the peers: %w", err)
		}
		return &cert, nil
	}
}

// tlsListener serves the peers over mutual TLS: a peer shows a client
// certificate from the cluster CA, or is refused in the handshake.
func tlsListener(ctx context.Context, c Config, clients *x509.CertPool) (net.Listener, error) {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("registry TLS certificate: %w", err)
	}
	ln, err := listenFreebind(ctx, c.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", c.Listen, err)
	}
	return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}), nil
}

// listenFreebind listens on addr even while no interface has its address
// yet (IP_FREEBIND). The peer listener is on the node's cluster address,
// which the network brings up on its own schedule; a plain bind failed
// with "cannot assign requested address" and the service restarted until
// the address came, close to systemd's start limit (seen in make e2e
// after a power cut). Peers reach the listener once the address is up.
func listenFreebind(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, syscall.IP_FREEBIND, 1)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("set IP_FREEBIND: %w", serr)
		}
		return nil
	}}
	return lc.Listen(ctx, "tcp", addr)
}

// Notify returns an sd_notify READY=1 sender for $NOTIFY_SOCKET (a no-op
// outside systemd).
func Notify() func() error {
	return func() error {
		sock := os.Getenv("NOTIFY_SOCKET")
		if sock == "" {
			return nil
		}
		if sock[0] == '@' {
			sock = "\x00" + sock[1:]
		}
		conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.Write([]byte("READY=1"))
		return err
	}
}

// Defaults returns the production wiring.
func Defaults(log *slog.Logger, console io.Writer) Options {
	return Options{
		BundleDir:   layout.BundleDir,
		UpgradesDir: layout.UpgradesDir,
		CacheDir:    layout.RegistryCacheDir,
		ConfigFile:  layout.RegistryConfigFile,
		Loopback:    mirrors.Loopback,
		Log:         log,
		Notify:      Notify(),
		OtherSlot: &OtherSlot{
			Markers: []string{layout.RunTrialBoot, layout.RunInPlaceSlot}, ByPartLabel: "/dev/disk/by-partlabel", MountDir: layout.RegistryPreviousSlotDir,
			Interval: 5 * time.Second, Log: log, Mount: slotmount.Mount,
		},
		SideLoad: &SideLoader{
			LabelDir: "/dev/disk/by-label", MountDir: layout.RegistryMountDir, Record: layout.RegistrySideloadLog,
			Console: console, Log: log, Interval: 2 * time.Second,
		},
	}
}

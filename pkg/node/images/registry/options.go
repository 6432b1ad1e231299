package registry

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// Option configures New, OpenLayout or OpenCache. WithLogger applies to all
// three, WithBundle to OpenCache only; the others configure a Server.
type Option func(*options) error

type options struct {
	log           *slog.Logger
	stores        []Store
	readerChecked map[Store]bool // WithReaderCheckedStores
	cache         *Cache
	peers         []*url.URL
	peerTLS       *tls.Config
	verifiedLimit int
	bundle        Store
	peerSpace     diskspace.FS
	peerReserve   uint64
	peerBlobMax   int64
	serverOnly    []string // server options given, to reject them for stores
	cacheOnly     []string // cache options given, to reject them elsewhere
}

const defaultVerifiedLimit = 1 << 16

func applyOptions(opts []Option) (*options, error) {
	o := &options{verifiedLimit: defaultVerifiedLimit, peerBlobMax: DefaultPeerBlobLimit}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	return o, nil
}

// storeOptions applies options for a store constructor.
func storeOptions(opts []Option, what string) (*options, error) {
	o, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	if len(o.serverOnly) > 0 {
		return nil, fmt.Errorf("%s: options %s only apply to a server", what, strings.Join(o.serverOnly, ", "))
	}
	if what != "OpenCache" && len(o.cacheOnly) > 0 {
		return nil, fmt.Errorf("%s: options %s only apply to OpenCache", what, strings.Join(o.cacheOnly, ", "))
	}
	return o, nil
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("WithLogger: nil logger")
		}
		o.log = l
		return nil
	}
}

// WithStores adds stores, consulted in order (before the cache).
func WithStores(stores ...Store) Option {
	return func(o *options) error {
		o.serverOnly = append(o.serverOnly, "WithStores")
		for i, s := range stores {
			if s == nil {
				return fmt.Errorf("WithStores: store %d is nil", i)
			}
		}
		o.stores = append(o.stores, stores...)
		return nil
	}
}

// WithReaderCheckedStores adds stores as WithStores does, whose content
// the server sends as it is on disk, without hashing it first: content
// every reader checks against its digest itself, for which a hash here
// would only cost the serving node a pass over it (the upgrade share,
// whose blobs a fetching peer checks against their digests, and the parts
// among them its installer again against the signed manifest). A corrupt
// blob there reaches its reader, which refuses it.
func WithReaderCheckedStores(stores ...Store) Option {
	add := WithStores(stores...)
	return func(o *options) error {
		if err := add(o); err != nil {
			return fmt.Errorf("WithReaderCheckedStores: %w", err)
		}
		if o.readerChecked == nil {
			o.readerChecked = map[Store]bool{}
		}
		for _, s := range stores {
			o.readerChecked[s] = true
		}
		return nil
	}
}

// WithCache sets the writable cache: it is consulted after the stores, and
// content fetched from peers is kept in it.
func WithCache(c *Cache) Option {
	return func(o *options) error {
		o.serverOnly = append(o.serverOnly, "WithCache")
		if c == nil {
			return errors.New("WithCache: nil cache")
		}
		o.cache = c
		return nil
	}
}

// WithPeers sets the base URLs of other nodes' registries (for example
// "https://10.0.0.11:5443"), asked in order for content that no local store
// has. tlsConfig (may be nil) is used for https peers. Requires WithCache.
func WithPeers(peers []string, tlsConfig *tls.Config) Option {
	return func(o *options) error {
		o.serverOnly = append(o.serverOnly, "WithPeers")
		for _, p := range peers {
			u, err := url.Parse(strings.TrimSuffix(p, "/"))
			if err != nil {
				return fmt.Errorf("WithPeers: %w", err)
			}
			if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("WithPeers: %q is not an http(s) base URL", p)
			}
			o.peers = append(o.peers, u)
		}
		o.peerTLS = tlsConfig
		return nil
	}
}

// WithPeerSpace makes the server ask fs (nil: the kernel's statfs, also
// the default) for the cache's free space before it writes a blob fetched
// from a peer, and keep reserve bytes of it free (default 0): a blob that
// does not fit is refused, with the sizes (diskspace.ErrNoSpace).
func WithPeerSpace(fs diskspace.FS, reserve uint64) Option {
	return func(o *options) error {
		o.serverOnly = append(o.serverOnly, "WithPeerSpace")
		o.peerSpace, o.peerReserve = fs, reserve
		return nil
	}
}

// WithPeerBlobLimit caps a blob fetched from a peer when no manifest in the
// cache gives its size (default DefaultPeerBlobLimit): longer is refused
// (ErrPeerBlobTooLarge). A blob a cached manifest lists is read to exactly
// its descriptor's size instead.
func WithPeerBlobLimit(n int64) Option {
	return func(o *options) error {
		o.serverOnly = append(o.serverOnly, "WithPeerBlobLimit")
		if n < 1 {
			return fmt.Errorf("WithPeerBlobLimit: %d is not positive", n)
		}
		o.peerBlobMax = n
		return nil
	}
}

// WithVerifiedLimit bounds how many verified digests are remembered
// (default 65536); beyond it the oldest are hashed again when next served.
func WithVerifiedLimit(n int) Option {
	return func(o *options) error {
		o.serverOnly = append(o.serverOnly, "WithVerifiedLimit")
		if n < 1 {
			return fmt.Errorf("WithVerifiedLimit: %d is not positive", n)
		}
		o.verifiedLimit = n
		return nil
	}
}

// WithBundle gives OpenCache the slot's bundle, whose tags can never be
// shadowed: AddLayout refuses a side-load that tags a name:tag the bundle
// holds with another digest (ErrShadowsBundle). (A server consults its
// stores before the cache in any case; see New.)
func WithBundle(bundle Store) Option {
	return func(o *options) error {
		o.cacheOnly = append(o.cacheOnly, "WithBundle")
		if bundle == nil {
			return errors.New("WithBundle: nil store")
		}
		o.bundle = bundle
		return nil
	}
}

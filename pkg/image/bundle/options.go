package bundle

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

// CacheSubdir is the directory under the terrarium cache ($TERRARIUM_CACHE)
// that holds resolved images by default.
const CacheSubdir = "bundle-blobs"

// ProgressFunc is told, while an image's blobs are copied, how many of its
// bytes are done out of its total.
type ProgressFunc func(image string, done, total int64)

// Option configures Resolve and WriteLayout.
type Option func(*options)

type options struct {
	cacheDir string
	keychain authn.Keychain
	progress ProgressFunc
	log      *slog.Logger
	epoch    time.Time
	compiler Compiler
	goCmd    string
	// artifacts holds built programs and Debian layers.
	artifacts *cache.Cache
	// preferred is the source kind to use where an image has it.
	preferred string
}

// artifactCache is the cache of built programs and Debian layers.
func (o options) artifactCache() (*cache.Cache, error) {
	if o.artifacts != nil {
		return o.artifacts, nil
	}
	return cache.New(cache.DefaultDir())
}

func newOptions(opts []Option) options {
	o := options{
		cacheDir: filepath.Join(cache.DefaultDir(), CacheSubdir),
		keychain: authn.DefaultKeychain,
		progress: func(string, int64, int64) {},
		log:      slog.New(slog.DiscardHandler),
		epoch:    epochFromEnv(),
		goCmd:    "go",
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.compiler == nil {
		o.compiler = GoTool{Path: o.goCmd}
	}
	return o
}

// epochFromEnv is SOURCE_DATE_EPOCH, or the Unix epoch when it is unset or
// not a number.
func epochFromEnv() time.Time {
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Unix(n, 0).UTC()
		}
	}
	return time.Unix(0, 0).UTC()
}

// WithCacheDir stores resolved images in dir, an OCI image layout used as a
// content-addressed cache. The default is $TERRARIUM_CACHE/bundle-blobs.
func WithCacheDir(dir string) Option {
	return func(o *options) {
		if dir != "" {
			o.cacheDir = dir
		}
	}
}

// WithKeychain sets the credentials for registry sources; the default is
// authn.DefaultKeychain (the Docker config).
func WithKeychain(kc authn.Keychain) Option {
	return func(o *options) { o.keychain = kc }
}

// WithProgress reports the bytes copied per image.
func WithProgress(fn ProgressFunc) Option {
	return func(o *options) {
		if fn != nil {
			o.progress = fn
		}
	}
}

// WithLogger logs to l; the default discards.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithEpoch sets the timestamp of built images (file mtimes and the config's
// created time). The default is $SOURCE_DATE_EPOCH, or 0.
func WithEpoch(t time.Time) Option {
	return func(o *options) { o.epoch = t.UTC().Truncate(time.Second) }
}

// WithCompiler replaces the compiler of build sources; the default is
// GoTool running the go command.
func WithCompiler(c Compiler) Option {
	return func(o *options) { o.compiler = c }
}

// WithGoCommand sets the go command used to build and to fingerprint build
// sources; the default is "go" from $PATH.
func WithGoCommand(path string) Option {
	return func(o *options) { o.goCmd = path }
}

// WithArtifactCache keeps the programs that component sources build, and
// their Debian layers, in c; the default is the cache at $TERRARIUM_CACHE.
func WithArtifactCache(c *cache.Cache) Option {
	return func(o *options) { o.artifacts = c }
}

// WithPreferredSource resolves each image from its first source of kind
// ("registry", "build", "layout" or "tarball") where it lists one among its
// alternatives, and from its source otherwise.
func WithPreferredSource(kind string) Option {
	return func(o *options) { o.preferred = kind }
}
